"""Options shared by several commands."""

from __future__ import annotations

import typer

from pdctl.errors import UsageError

SPEC = typer.Argument(..., help="Spec file, or - for stdin.")
PHASE = typer.Option(None, "--phase", "-p", help="Render at this phase instead of the spec's.")
TARGET = typer.Option(
    None,
    "--target",
    metavar="TARGET",
    help="hosts or kubernetes (phases 2 and 3; default from the spec).",
)


def check_phase_target(phase: int | None, target: str | None) -> None:
    if phase is not None and phase not in (0, 1, 2, 3):
        raise UsageError(f"--phase must be 0, 1, 2 or 3 (got {phase})")
    if target is not None and target not in ("hosts", "kubernetes"):
        raise UsageError(f"--target must be hosts or kubernetes (got {target!r})")
