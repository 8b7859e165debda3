"""`pdctl validate`: check a spec (and that it plans) without rendering anything."""

from __future__ import annotations

import typer

from pdctl.cli.options import PHASE, SPEC, TARGET


def register(app: typer.Typer) -> None:
    @app.command("validate")
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
    ) -> None:
        """Check SPEC: one line per problem (file:line: field: what; fix), exit 2 when bad.

        A role that does not fit on the spec's GPU is a warning on stderr (exit 1 with
        --strict): vLLM would refuse to start it."""
        from pdctl.cli.options import check_phase_target
        from pdctl.cli.plan_cmd import capacity_warnings
        from pdctl.cli.specfile import plan_spec, read_spec

        check_phase_target(phase, target)
        parsed, source = read_spec(spec)
        plan = plan_spec(parsed, source, phase, target)
        for note in plan.notes:
            typer.echo(f"{spec}: warning: {note}", err=True)
        warnings = capacity_warnings(parsed, spec)
        for line in warnings:
            typer.echo(line, err=True)
        if warnings and strict:
            typer.echo(f"{spec}: refused (--strict): a role does not fit on its GPU", err=True)
            raise typer.Exit(1)
        n = len(plan.instances)
        typer.echo(
            f"{spec}: ok: {plan.name}, phase {plan.phase} on {plan.target}, "
            f"{n} {'unit' if n == 1 else 'units'} planned (vLLM {plan.release.version})"
            + (f", {len(warnings)} capacity warning(s)" if warnings else "")
        )
