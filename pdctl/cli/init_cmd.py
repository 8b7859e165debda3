"""`pdctl init`: write a commented example spec."""

from __future__ import annotations

from pathlib import Path

import typer

from pdctl.errors import PdctlError, UsageError

PHASES = {
    0: "init-phase0.yaml",
    1: "init-phase1.yaml",
    2: "init-phase2.yaml",
    3: "init-phase3.yaml",
}


def example_text(phase: int) -> str:
    from pdctl.render.template import templates_dir

    return (templates_dir() / PHASES[phase]).read_text(encoding="utf-8")


def register(app: typer.Typer) -> None:
    @app.command("init")
    def init(
        phase: int = typer.Option(0, "--phase", "-p", help="Phase of the example: 0, 1, 2 or 3."),
        output: Path | None = typer.Option(
            None, "--output", "-o", help="Write to this file instead of stdout."
        ),
        force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
    ) -> None:
        """Write a commented example spec for a phase (stdout, or -o FILE)."""
        if phase not in PHASES:
            raise UsageError(f"--phase must be 0, 1, 2 or 3 (got {phase})")
        text = example_text(phase)
        if output is None:
            typer.echo(text, nl=False)
            return
        if output.is_dir():
            raise UsageError(f"--output {output} is a folder", fix="give a file name")
        if output.exists() and not force:
            raise UsageError(f"{output} exists", fix="use --force to overwrite it")
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise PdctlError(f"cannot write {output}: {exc.strerror or exc}") from None
        typer.echo(f"wrote {output}", err=True)
