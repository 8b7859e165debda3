"""The layer graph of docs DESIGN.md holds in pdctl's own imports (read from the source with
ast, imports inside functions included): nothing imports a higher layer, and no module
reaches itself through imports (a circle)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

from tests.conftest import ROOT

PKG = ROOT / "pdctl"

# DESIGN.md "Layers", lowest first: a module may import its own layer and any lower one.
# errors.py, compat.py (the version table) and hami.py (the HAMi slice formula) are base
# modules every layer may use.
RANK = {
    "errors": 0,
    "compat": 0,
    "hami": 0,
    "preflight.facts": 1,  # the fact types preflight fills and the plan reads
    "spec": 2,
    "plan": 3,
    "capacity": 4,
    "autoscale": 4.5,  # the autoscaling policy and its replay (pure; targets from plan)
    "render": 5,
    "targets": 6,
    "actions": 7,
    "scale": 7.5,  # `pdctl scale` on hosts: actions.up plus the router's worker API
    "preflight": 8,  # preflight (a file per topic: commands, parser, check) and top share a
    # rank and import none of each other
    "top": 8,  # `pdctl top`: reads a running deployment through targets, like preflight
    "offline": 8,  # `pdctl bundle`, `up --bundle`: pip download, the manifest, the copy
    "bench": 8.5,  # `pdctl bench`/`tune`: loads a deployment, reads it with top's sources
    "report": 8.5,  # HTML reports of bench and plan (pure: report data in, a string out)
    "inputs": 9,  # spec + overlays + model + --facts -> plan and bundle, for every command
    "cli": 10,
    "docgen": 10,  # writes docs/ from the spec models and the CLI: a CLI tool
    "explain": 9,  # `pdctl explain`'s text from the spec models and the init templates
    "__main__": 10,
    "": 0,  # pdctl/__init__.py: the version
    "hostside": 0,  # programs pdctl ships to the hosts (standard library only)
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in PKG.rglob("*.py")}


def layer(module: str) -> str:
    parts = module.split(".")
    if parts[1:3] == ["preflight", "facts"]:  # the fact types, below the plan that reads them
        return "preflight.facts"
    return parts[1] if len(parts) > 1 else ""


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(module: str, runtime_only: bool = False) -> set[str]:
    """The pdctl modules `module` imports anywhere in its file (functions included); with
    runtime_only, not those under `if TYPE_CHECKING:` (never executed)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    skip: set[int] = set()
    if runtime_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and _type_checking(node):
                skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "pdctl"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            if base.split(".")[0] != "pdctl":
                continue
            for alias in node.names:  # `from pdctl.targets import host_keys`: the submodule
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in MODULES else base)
    return {m for m in out if m in MODULES and m != module}


def upward_imports() -> list[str]:
    bad = []
    for module in sorted(MODULES):
        mine = layer(module)
        for target in sorted(imports(module)):
            theirs = layer(target)
            if theirs == mine:
                continue
            if RANK[theirs] > RANK[mine] or (
                RANK[theirs] == RANK[mine] and RANK[mine] not in (0, 10)
            ):
                bad.append(f"{module} ({mine}) imports {target} ({theirs})")
    return bad


def cycles(runtime_only: bool = False) -> list[list[str]]:
    """Every circle of imports (those under `if TYPE_CHECKING:` too, unless runtime_only),
    each as the modules on it (Tarjan's strongly connected components of more than one
    module, or a module importing itself)."""
    graph = {m: sorted(imports(m, runtime_only=runtime_only)) for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for m in sorted(MODULES):
        if m not in index:
            visit(m)
    return sorted(found)


def test_every_module_has_a_layer() -> None:
    assert sorted(m for m in MODULES if layer(m) not in RANK) == []


def test_no_layer_imports_a_higher_one() -> None:
    assert upward_imports() == []


def test_no_import_circles() -> None:
    """None at all: not at run time, and not through the imports only a type checker reads
    (`if TYPE_CHECKING:`), which would say a helper reaches back into what uses it."""
    assert cycles() == []


def test_no_command_module_imports_another() -> None:
    """What two commands share lives below them (bench/, actions.py, a cli helper module)."""
    commands = {m for m in MODULES if m.startswith("pdctl.cli.") and m.endswith("_cmd")}
    assert len(commands) > 10
    assert sorted(f"{m} imports {t}" for m in commands for t in imports(m) & commands) == []



# Preflight keeps the pure/impure split inside each topic (pdctl/preflight/<topic>.py): what
# the registry calls as a topic's commands, parsers, fields and checks, and all it reaches by
# name in its file, neither imports an I/O module nor uses a name such an import binds (only a
# topic's probe, the runner run.py and record.py may).
IO = re.compile(r"(subprocess|socket|threading|os|shutil|tempfile|time|pathlib|concurrent|"
                r"kubernetes|pynvml|paramiko|docker|pdctl\.targets|pdctl\.preflight\.(run|record))"
                r"(\.|$)")


def _io_names(nodes: Iterable[ast.AST]) -> set[str]:
    return {a.asname or a.name.split(".")[0] for n in nodes for a in getattr(n, "names", ())
            if (isinstance(n, ast.Import) and IO.match(a.name))
            or (isinstance(n, ast.ImportFrom) and not n.level and IO.match(n.module or ""))}


def impure_reach(module: str, roots: set[str]) -> dict[str, str]:
    """root -> the chain of the file's definitions to the I/O it reaches, for each root (a
    function of `module`) that reaches any. Names only in annotations and locals don't count."""
    tree = ast.parse(MODULES[module].read_text())
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    uses, bad = {}, {}
    for d, node in defs.items():
        notes = {id(x) for n in ast.walk(node) for a in (getattr(n, "annotation", None),
                 getattr(n, "returns", None)) if a is not None for x in ast.walk(a)}
        names = [n for n in ast.walk(node) if isinstance(n, ast.Name) and id(n) not in notes]
        local = {n.id for n in names if isinstance(n.ctx, ast.Store)}
        local |= {a.arg for a in ast.walk(node) if isinstance(a, ast.arg)}
        uses[d] = {n.id for n in names} - local
        bad[d] = (uses[d] & _io_names(tree.body)) | _io_names(ast.walk(node))
    found = {}
    for root in roots & defs.keys():
        path, todo = {root: root}, [root]
        while todo and root not in found:
            d = todo.pop()
            if bad[d]:
                found[root] = f"{path[d]}: {', '.join(sorted(bad[d]))}"
            for callee in uses[d] & defs.keys() - path.keys():
                path[callee] = f"{path[d]} -> {callee}"
                todo.append(callee)
    return found


def test_preflight_topics_keep_their_pure_parts_pure() -> None:
    from pdctl.preflight.registry import TOPICS

    roots: dict[str, set[str]] = {}
    for t in TOPICS:
        for fn in filter(None, (t.commands, t.fields, t.check_host, t.check,
                                *t.parsers.values())):
            roots.setdefault(fn.__module__, set()).add(fn.__name__)
    assert len(roots) == len(TOPICS) == 8
    assert {m: impure_reach(m, r) for m, r in roots.items()} == {m: {} for m in roots}
    for module in ("pdctl.preflight.facts", "pdctl.preflight.finding"):  # no I/O import at all
        assert not _io_names(ast.walk(ast.parse(MODULES[module].read_text())))
    # it sees the probes as such, through calls and imports inside functions too
    assert set(impure_reach("pdctl.preflight.gpu", {"dump", "fields"})) == {"dump"}
    assert set(impure_reach("pdctl.preflight.cluster", {"gather", "check"})) == {"gather"}
    assert "open_host" in impure_reach("pdctl.preflight.transfer", {"probe"})["probe"]


# The concrete targets, each defined in its package's target.py (pdctl.targets.hosts.target
# ...): outside its package nothing asks for one by type or builds one; actions and the CLI
# ask the package's CAPABILITIES and open targets through pdctl.targets.open_target.
TARGET_PACKAGES = sorted(
    m.rpartition(".")[0]
    for m in MODULES
    if m.startswith("pdctl.targets.") and m.endswith(".target")
)


def concrete_targets() -> dict[str, str]:
    """Class name -> the target package that defines it (classes with a `kind`)."""
    out = {}
    for package in TARGET_PACKAGES:
        tree = ast.parse(MODULES[f"{package}.target"].read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any(
                isinstance(s, ast.AnnAssign) and getattr(s.target, "id", "") == "kind"
                for s in node.body
            ):
                out[node.name] = package
    return out


def reaches_into_targets() -> list[str]:
    """Modules outside a target package that import its target module or test an object
    against one of its classes (isinstance)."""
    names = concrete_targets()
    bad = []
    for module, path in sorted(MODULES.items()):
        outside = [p for p in TARGET_PACKAGES if module != p and not module.startswith(p + ".")]
        for package in outside:
            if f"{package}.target" in imports(module):
                bad.append(f"{module} imports {package}.target")
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance"):
                continue
            kinds = node.args[1] if len(node.args) > 1 else None
            for n in ast.walk(kinds) if kinds is not None else []:
                if isinstance(n, ast.Name) and n.id in names and names[n.id] in outside:
                    bad.append(f"{module}:{node.lineno} isinstance on {n.id}")
    return bad


def test_no_concrete_target_outside_its_package() -> None:
    assert sorted(concrete_targets()) == ["ContainerHosts", "HostsTarget", "KubeTarget"]
    assert reaches_into_targets() == []


def test_the_checks_see_what_they_guard() -> None:
    """The graph is read right: a known downward import, an import inside a function, a
    relative-free `from pkg import submodule`."""
    assert "pdctl.plan.model" in imports("pdctl.render.host") or any(
        m.startswith("pdctl.plan") for m in imports("pdctl.render.host")
    )
    assert "pdctl.targets.kube.target" in imports("pdctl.targets.kube")  # in open_target
    assert "pdctl.targets.host_keys" in imports("pdctl.targets.ssh")
    assert "pdctl.targets.hosts.fleet" in imports("pdctl.targets.hosts.rollout")
    assert "pdctl.targets.hosts.fleet" not in imports(
        "pdctl.targets.hosts.rollout", runtime_only=True
    )  # under TYPE_CHECKING


def test_targets_render_nothing() -> None:
    """What a target runs comes rendered in the bundle (the units' files, Bundle.scripts for
    the scripts pdctl runs on hosts): no target module uses the template engine."""
    rendering = [
        m for m in MODULES if layer(m) == "targets" and "pdctl.render.template" in imports(m)
    ]
    assert rendering == []


def test_only_targets_choose_by_the_plans_target() -> None:
    """cli/, top/ and bench/ ask the target (open_target, observe(), capabilities) or a plan
    property, never `plan.target ==` / `!=` themselves (issue 39)."""
    import re

    paths = [p for part in ("cli", "top", "bench") for p in sorted((PKG / part).rglob("*.py"))]
    assert [str(p) for p in paths if re.search(r"\bplan\.target\s*[!=]=", p.read_text())] == []
