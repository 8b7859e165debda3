"""Reading a spec from a path or stdin: the CLI's one door to spec files."""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pdctl.errors import SpecError, UsageError
from pdctl.spec.source import MAX_SPEC_BYTES, Source, too_big

if TYPE_CHECKING:  # the plan and the models load when a spec is read, not at start-up
    from pdctl.facts import Facts
    from pdctl.plan import Plan
    from pdctl.plan.parallel import Dims
    from pdctl.plan.place import Chooser
    from pdctl.render.bundle import Bundle
    from pdctl.spec import Spec

MAX_CONFIG_BYTES = 2 * 1024 * 1024  # a model's config.json is a few KiB
_NO_PLUGINS = "PYDANTIC_DISABLE_PLUGINS"


# The `--overlay` files of the running command (set by `with_overlays`, read by read_spec).
OVERLAYS: ContextVar[tuple[str, ...]] = ContextVar("pdctl_overlays", default=())


def with_overlays(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command `--overlay FILE` (repeatable): every spec the command reads through
    read_spec is its SPEC deep-merged with these files, in order (docs/spec.md, Overlays)."""
    import typer

    option = typer.Option(
        None,
        "--overlay",
        metavar="FILE",
        help="Deep-merge FILE over SPEC (repeatable; later files win): mappings merge, lists "
        "replace, hosts merge by name. See docs/spec.md, Overlays.",
    )
    signature = inspect.signature(command, eval_str=True)
    extra = inspect.Parameter(
        "overlay", inspect.Parameter.KEYWORD_ONLY, default=option, annotation=list[str] | None
    )

    @functools.wraps(command)
    def run(*args: Any, overlay: list[str] | None = None, **kwargs: Any) -> Any:
        token = OVERLAYS.set(tuple(overlay or ()))
        try:
            return command(*args, **kwargs)
        finally:
            OVERLAYS.reset(token)

    params = list(signature.parameters.values())
    run.__signature__ = signature.replace(parameters=[*params, extra])  # type: ignore[attr-defined]
    run.__annotations__ = {**{p.name: p.annotation for p in params}, "overlay": extra.annotation}
    del run.__wrapped__  # type: ignore[attr-defined]  # typer reads the signature above
    return run


def read_spec(path: str) -> tuple[Spec, Source]:
    """Load SPEC (a file, or '-' for stdin) merged with the command's `--overlay` files.
    Every failure is one located SpecError (SpecErrors for several problems)."""
    overlays = OVERLAYS.get()
    if path == "-" and "-" in overlays:
        raise UsageError("SPEC and an --overlay cannot both be - (stdin)", fix="give a file")
    spec, source = _load([(_read_text(p), "<stdin>" if p == "-" else p) for p in (path, *overlays)])
    if spec.model.max_model_len is not None:
        # A plan check every command makes, `pdctl plan` too: it needs the model's config,
        # which only the CLI reads.
        from pdctl.plan.context import check_max_model_len

        try:
            check_max_model_len(spec, *known_model_config(spec, source.file))
        except SpecError as exc:
            raise source.locate(exc) from None
    return spec, source


def _read_text(path: str) -> str:
    if path == "-":
        return _read_stdin()
    p = Path(path)
    if not p.exists():
        raise SpecError(
            "no such file", file=path, fix="check the path, or create one with `pdctl init`"
        )
    if p.is_dir():
        raise SpecError("is a directory, not a spec file", file=path)
    return read_bounded(p, MAX_SPEC_BYTES, path)


def _load(texts: list[tuple[str, str]]) -> tuple[Spec, Source]:
    """Parse and validate (with overlays merged) with pydantic's plugins off: the spec's
    validators are built at the first load, and looking for plugins reads every installed
    package's entry points (20-45 ms of a cold render; docs/performance.md). pdctl has no use
    for them."""
    from pdctl.spec.load import load_data
    from pdctl.spec.overlay import merge
    from pdctl.spec.source import parse

    old = os.environ.get(_NO_PLUGINS)
    os.environ[_NO_PLUGINS] = "1"
    try:
        for text, name in texts[1:]:
            _not_empty_overlay(text, name)
        data, source = merge(*(parse(text, name) for text, name in texts))
        return load_data(data, source), source
    finally:
        if old is None:
            del os.environ[_NO_PLUGINS]
        else:
            os.environ[_NO_PLUGINS] = old


def _not_empty_overlay(text: str, name: str) -> None:
    """An overlay with no keys (empty, or comments only) changes nothing: refused, naming the
    overlay, as it is most likely the wrong file (docs/spec.md, "Overlays")."""
    content = [
        line
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#") and line.strip() not in ("---", "...")
    ]
    if not content:
        raise SpecError(
            "this overlay is empty: it holds no keys to change",
            file=name,
            line=1,
            fix="write the keys it changes, e.g. `kubernetes: {namespace: prod}`, or drop this "
            "--overlay",
        )


def _read_stdin() -> str:
    stream = sys.stdin
    if stream is None:
        raise SpecError(
            "standard input is closed", file="<stdin>", fix="pipe the spec in, or give its path"
        )
    raw = getattr(stream, "buffer", None)  # a text-only stdin (tests) has none
    try:
        data = raw.read(MAX_SPEC_BYTES + 1) if raw is not None else stream.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror or exc}", file="<stdin>") from None
    return _text(data, MAX_SPEC_BYTES, "<stdin>")


def read_bounded(path: Path, limit: int, name: str) -> str:
    """A UTF-8 file of at most `limit` bytes (a spec, a model config). Reads at most limit + 1
    bytes, so `/dev/zero` or a huge file is refused without being read."""
    try:
        with path.open("rb") as stream:
            data = stream.read(limit + 1)
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror or exc}", file=name) from None
    return _text(data, limit, name)


def _text(data: bytes | str, limit: int, name: str) -> str:
    if len(data) > limit:
        raise too_big(name, limit)
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError("is not UTF-8 text", file=name) from None


def read_model_config(ref: str, spec_file: str, source: Source | None = None) -> dict[str, Any]:
    """`model.config`: a model's config.json, relative to the spec file (or, for a spec read
    from stdin, the working folder), at most MAX_CONFIG_BYTES. One SpecError when unusable,
    located in the spec when its source is given."""
    try:
        return _model_config(ref, spec_file)
    except SpecError as exc:
        raise (source.locate(exc) if source is not None else exc) from None


def _model_config(ref: str, spec_file: str) -> dict[str, Any]:
    base = Path.cwd() if spec_file in ("-", "<stdin>") else Path(spec_file).resolve().parent
    file = Path(ref).expanduser()
    file = file if file.is_absolute() else base / file
    fix = "give the path of the model's config.json"
    if not file.is_file():
        what = "no such file" if not file.exists() else "not a regular file"
        raise SpecError(f"{what}: {file}", path="model.config", fix=fix)
    try:
        data = json.loads(read_bounded(file, MAX_CONFIG_BYTES, str(file)))
    except SpecError as exc:
        raise SpecError(f"{file}: {exc.message}", path="model.config", fix=exc.fix) from None
    except RecursionError:
        raise SpecError(f"{file} is nested too deeply", path="model.config", fix=fix) from None
    except ValueError as exc:  # JSONDecodeError; an int past 4,300 digits
        what = str(exc) if isinstance(exc, json.JSONDecodeError) else "a number is too long"
        raise SpecError(f"cannot read {file} as JSON: {what}", path="model.config") from None
    if not isinstance(data, dict):
        raise SpecError(f"{file} is not a JSON object", path="model.config", fix=fix)
    return data


def plan_from(
    path: str, phase: int | None = None, target: str | None = None, **kwargs
) -> tuple[Plan, Source]:
    """Load SPEC and plan it; plan errors are located in the spec file."""
    spec, source = read_spec(path)
    return plan_spec(spec, source, phase, target, **kwargs), source


def plan_spec(
    spec: Spec, source: Source, phase: int | None = None, target: str | None = None, **kwargs
) -> Plan:
    """Plan a spec already read (SPEC `-` can be read only once); errors located in it."""
    from pdctl.plan import make_plan

    try:
        if "dims" not in kwargs:
            kwargs["dims"] = model_dims(spec, source.file, phase)
        return make_plan(spec, phase=phase, target=target, **kwargs)
    except SpecError as exc:
        raise source.locate(exc) from None


def caution_lines(plan: Plan, source: Source) -> list[str]:
    """The plan's located warnings (`file:line: warning: path: what; fix`): settings that may
    not work where they run (plan/transport.py); `--strict` refuses them."""
    from pdctl.errors import one_line

    out = []
    for c in plan.cautions:
        located = source.locate(SpecError(c.message, path=c.path, fix=c.fix))
        where = located.file
        if located.line_no is not None:
            where = f"{where}:{located.line_no}"
        out.append(one_line(f"{where}: warning: {c.path}: {c.message}; {c.fix}"))
    return out


def facts_chooser(facts: Path, spec: Spec) -> Chooser:
    """The topology chooser of a preflight recording (`pdctl preflight --record DIR`)."""
    from pdctl.facts import facts_from
    from pdctl.plan.topology import chooser
    from pdctl.probe.record import read

    found = facts_from(read(facts, tuple(h.name for h in spec.hosts)))
    recording_matches(facts, found, spec)
    return chooser(found)


def recording_matches(root: Path, facts: Facts, spec: Spec) -> None:
    """A recording of other machines must not silently pick GPUs: one usage error (exit 2)
    when no host of the spec has a folder in it, or when a host's recording lacks GPUs the
    spec lists for it (another machine, or a stale recording)."""
    names = [h.name for h in spec.hosts]
    recorded = [h.name for h in facts.hosts]
    fix = f"record these hosts with `pdctl preflight SPEC --record {root}`"
    if names and recorded and not set(names) & set(recorded):
        raise UsageError(
            f"--facts {root}: no folder for a host of the spec (it has {', '.join(recorded)}; "
            f"the spec's hosts are {', '.join(names)})",
            fix=fix + ", or name each host's folder after its hosts[].name",
        )
    for host in spec.hosts:
        hf = facts.host(host.name)
        if hf is None or not hf.gpus or not host.gpus:
            continue
        missing = sorted(set(host.gpus) - {g.index for g in hf.gpus})
        if missing:
            have = ",".join(str(g.index) for g in hf.gpus)
            raise UsageError(
                f"--facts {root}: host {host.name}'s recording has GPUs {have}, but the spec "
                f"lists {','.join(map(str, missing))} too (a recording of another machine, or a "
                "stale one)",
                fix=fix,
            )


def known_model_config(spec: Spec, spec_file: str) -> tuple[dict[str, Any] | None, str]:
    """(the model's config.json values, where they came from): `model.config` when it reads,
    else pdctl's model table; None when neither knows the model."""
    from pdctl.capacity.models import builtin_config

    if spec.model.config:
        try:
            return _model_config(spec.model.config, spec_file), "model.config"
        except SpecError:
            pass  # `pdctl plan` reports an unreadable config; fall back to the table
    return builtin_config(spec.model.name), "pdctl's model table"


def model_dims(spec: Spec, spec_file: str, phase: int | None = None) -> Dims | None:
    """The model's heads, KV heads, layers and experts for the parallelism checks
    (plan/parallel.py): from `model.config` when it reads, else pdctl's model table; None when
    neither knows the model, or when every role runs on one GPU (nothing to check, and the
    capacity package stays unimported)."""
    from pdctl.plan.parallel import Dims, roles

    shapes = [r for _, r in roles(spec, spec.phase if phase is None else phase)]
    if all(
        getattr(r, "tensor_parallel", 1) == 1
        and getattr(r, "pipeline_parallel", 1) == 1
        and not getattr(r, "expert_parallel", False)
        for r in shapes
    ):
        return None
    from pdctl.capacity.params import parse_config

    raw, where = known_model_config(spec, spec_file)
    if raw is None:
        return None
    try:
        m = parse_config(spec.model.name, raw, None, from_table=where != "model.config")
    except SpecError:
        return None
    return Dims.of(m, where)


def load(
    spec: str, phase: int | None, target: str | None, facts: Path | None = None
) -> tuple[Plan, Bundle]:
    """Plan and render SPEC exactly as `pdctl render` does (up, down, status, logs); `facts`: a
    preflight recording that picks each instance's GPUs by topology (`--facts DIR`)."""
    from pdctl.cli.options import check_phase_target
    from pdctl.render import render

    check_phase_target(phase, target)
    if facts is None:
        plan, source = plan_from(spec, phase, target)
    else:
        loaded, source = read_spec(spec)  # once: `-` (stdin) cannot be read twice
        plan = plan_spec(loaded, source, phase, target, choose=facts_chooser(facts, loaded))
    try:
        return plan, render(plan)
    except SpecError as exc:
        raise source.locate(exc) from None
