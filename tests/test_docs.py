"""Docs generated from the models stay fresh; every field and command is documented."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from pdctl.docgen import reference
from pdctl.spec.model import Spec
from pdctl.spec.walk import models
from tests.conftest import ROOT


def test_spec_reference_is_fresh() -> None:
    path = ROOT / "docs" / "spec-reference.md"
    assert path.read_text() == reference(), (
        "docs/spec-reference.md is stale: run `python -m pdctl.docgen docs/spec-reference.md`"
    )


def test_every_spec_field_has_a_description() -> None:
    missing = []
    for model in models(Spec):
        assert issubclass(model, BaseModel)
        assert model.__doc__, f"{model.__name__} has no docstring"
        for name, field in model.model_fields.items():
            if not field.description and not _is_section(field.annotation):
                missing.append(f"{model.__name__}.{name}")
    assert not missing, f"fields without a description: {missing}"


def _is_section(annotation) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def test_schema_command_matches_models() -> None:
    from pdctl.cli.schema_cmd import spec_schema

    schema = spec_schema()
    assert schema["additionalProperties"] is False
    assert "maxModelLen" in schema["$defs"]["Model"]["properties"]
    assert set(schema["required"]) == {"name", "model"}


def test_docs_name_every_command() -> None:
    from typer.main import get_command

    from pdctl.cli.app import app

    text = "\n".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    text += (ROOT / "README.md").read_text()
    for name in get_command(app).commands:  # type: ignore[attr-defined]
        assert f"pdctl {name}" in text, f"no doc mentions `pdctl {name}`"


def test_cli_reference_is_fresh() -> None:
    from pdctl.cli.reference import reference

    path = ROOT / "docs" / "cli-reference.md"
    assert path.read_text() == reference(), (
        "docs/cli-reference.md is stale: run `python -m pdctl.cli.reference docs/cli-reference.md`"
    )


def test_connecting_commands_share_the_connection_options() -> None:
    """up, down, status, logs and preflight take the same SSH and Kubernetes options (one
    declaration, pdctl/cli/connect.py), with the same help and environment variables."""
    from typer.main import get_command

    from pdctl.cli.app import app

    commands = get_command(app).commands  # type: ignore[attr-defined]

    def options(name: str) -> dict[str, tuple[object, ...]]:
        return {
            p.opts[0]: (p.help, p.envvar, p.default) for p in commands[name].params if not p.hidden
        }

    shared = [
        "--known-hosts", "--accept-new-host-keys", "--identity", "--connect-timeout", "--parallel",
        "--kubeconfig", "--context",
    ]
    want = {o: options("up")[o] for o in shared}
    for name in ("down", "status", "logs", "preflight"):
        assert {o: options(name).get(o) for o in shared} == want, name


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        slug = _slug(line.lstrip("#"))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_relative_links_in_docs_resolve() -> None:
    """Every relative link in README.md and docs/*.md names a file that exists and, with
    `#anchor`, a heading of that file (GitHub's anchors)."""
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.name}: {target}: no file {file}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.name}: {target}: no heading #{anchor}")
    assert not broken, "\n".join(broken)


# Paths only the machine pdctl is built on has: its reference notes (/work/shared/research,
# the GPU fixtures under shared/) and any /work/ path. Docs cite what a user can open instead
# (the upstream file, issue or page; a file of this repository by its repository path).
MACHINE_PATH = re.compile(
    r"(?<![\w.-])(/work/\S*|(\.\./)*shared/(research|fixtures|crds|seed|gpu-vllm)\S*)"
)


def machine_paths(text: str) -> list[str]:
    return [m.group(0).strip("`),;") for m in MACHINE_PATH.finditer(text)]


def test_docs_cite_no_machine_path() -> None:
    assert machine_paths("see `/work/shared/research/mooncake.md` B.4") == [
        "/work/shared/research/mooncake.md"
    ]
    assert machine_paths("(`../shared/fixtures/gpu/README.md`)") == [
        "../shared/fixtures/gpu/README.md"
    ]
    assert machine_paths("`tests/fixtures/gpu/hami-h200/README.md`, /root/.cache") == []
    found = [
        f"{path.relative_to(ROOT)}:{n}: {hit}"
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for hit in machine_paths(line)
    ]
    assert found == [], "cite the upstream source a user can open instead"
