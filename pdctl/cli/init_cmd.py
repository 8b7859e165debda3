"""`pdctl init`: write a commented example spec."""

from __future__ import annotations

from pathlib import Path

import typer

from pdctl.cli.report_file import cannot_write, check_output_path
from pdctl.errors import UsageError
from pdctl.render.template import templates_dir

PHASES = {
    0: "init-phase0.yaml", 1: "init-phase1.yaml", 2: "init-phase2.yaml", 3: "init-phase3.yaml"}
SCHEMA_FILE = "pdctl-spec.schema.json"  # the local file `pdctl schema >` writes, for editors


def example_text(phase: int, schema: str | None = None) -> str:
    """The example spec of a phase, its first line the yaml-language-server modeline that
    points editors at the spec's JSON Schema (a path relative to the spec, or a URL)."""
    text = (templates_dir() / PHASES[phase]).read_text(encoding="utf-8")
    return modeline(schema or SCHEMA_FILE) + text


def modeline(schema: str) -> str:
    head = f"# yaml-language-server: $schema={schema}\n"
    if schema == SCHEMA_FILE:
        head += f"# (editors: `pdctl schema > {SCHEMA_FILE}` beside this file; docs/spec.md)\n"
    return head


def init(
    phase: int = typer.Option(0, "--phase", "-p", help="Phase of the example: 0, 1, 2 or 3."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write to this file instead of stdout."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
    schema: str | None = typer.Option(
        None, "--schema", metavar="REF",
        help="Where the first line's `$schema=` points editors: a path relative to the "
        "spec, or a URL. Default: pdctl-spec.schema.json (write it with `pdctl schema`)."),
) -> None:
    """Write a commented example spec for a phase (stdout, or -o FILE). Its first line
    points editors (yaml-language-server) at the spec's JSON Schema."""
    if phase not in PHASES:
        raise UsageError(f"--phase must be 0, 1, 2 or 3 (got {phase})")
    if schema is not None and (not schema.strip() or any(c in schema for c in "\r\n")):
        raise UsageError("--schema must be one line: a path or a URL")
    text = example_text(phase, schema)
    if output is None:
        typer.echo(text, nl=False)
        return
    check_output_path("--output", output, "spec.yaml")
    if output.exists() and not force:
        raise UsageError(f"{output} exists", fix="use --force to overwrite it")
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise cannot_write("--output", output, exc) from None
    typer.echo(f"wrote {output}", err=True)
