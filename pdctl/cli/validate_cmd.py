"""`pdctl validate`: check a spec (and that it plans and renders) without writing anything."""

from __future__ import annotations

import typer

from pdctl.cli.options import PHASE, SPEC, TARGET
from pdctl.cli.specfile import with_overlays


def register(app: typer.Typer) -> None:
    @app.command("validate")
    @with_overlays
    def validate(
        spec: str = SPEC,
        phase: int | None = PHASE,
        target: str | None = TARGET,
        strict: bool = typer.Option(
            False,
            "--strict",
            help="Refuse (exit 1) a spec with a role that does not fit on "
            "its GPU (hardware.gpu), instead of warning.",
        ),
        output: str = typer.Option(
            "text",
            "--output",
            "-o",
            metavar="FORMAT",
            help="text, or json: the summary as one document on stdout (a bad spec still "
            "exits 2 with its error lines on stderr).",
        ),
    ) -> None:
        """Check SPEC: one line per problem (file:line: field: what; fix), exit 2 when bad.

        A role that does not fit on the spec's GPU is a warning on stderr (exit 1 with
        --strict): vLLM would refuse to start it."""
        from pdctl.cli.options import check_phase_target
        from pdctl.cli.plan_cmd import capacity_warnings
        from pdctl.cli.specfile import plan_spec, read_spec
        from pdctl.errors import SpecError, UsageError

        check_phase_target(phase, target)
        if output not in ("text", "json"):
            raise UsageError(f"--output must be text or json (got {output!r})")
        parsed, source = read_spec(spec)
        plan = plan_spec(parsed, source, phase, target)
        for note in plan.notes:
            typer.echo(f"{spec}: warning: {note}", err=True)
        warnings = capacity_warnings(parsed, spec)
        for line in warnings:
            typer.echo(line, err=True)
        if warnings and strict:
            typer.echo(
                f"{spec}: refused (--strict): see the warnings above (a role that does not "
                "fit on its GPU, or a model pdctl could not check)",
                err=True,
            )
            raise typer.Exit(1)
        from pdctl.cli.summary import counted, planned
        from pdctl.render import render

        try:  # what `up` would start: the count `up --dry-run` lists (objects: rendered)
            word, names = planned(plan, render(plan) if plan.target == "kubernetes" else None)
        except SpecError as exc:
            raise source.locate(exc) from None
        if output == "json":
            import json

            doc = {
                "spec": spec,
                "valid": True,
                "name": plan.name,
                "phase": plan.phase,
                "target": plan.target,
                "engine": plan.release.version,
                f"{word}s": names,
                "warnings": [*plan.notes, *warnings],
            }
            typer.echo(json.dumps(doc, indent=2))
            return
        typer.echo(
            f"{spec}: ok: {plan.name}, phase {plan.phase} on {plan.target}, "
            f"{counted(len(names), word)} planned (vLLM {plan.release.version})"
            + (f", {len(warnings)} capacity warning(s)" if warnings else "")
        )
        from pdctl.plan.place import where

        for line in where(plan):  # where each instance goes (docs/placement.md)
            typer.echo(f"  {line}")
