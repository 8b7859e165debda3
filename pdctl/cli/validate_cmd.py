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
    ) -> None:
        """Check SPEC: one line per problem (file:line: field: what; fix), exit 2 when bad."""
        from pdctl.cli.options import check_phase_target
        from pdctl.cli.specfile import plan_from

        check_phase_target(phase, target)
        plan, _ = plan_from(spec, phase, target)
        n = len(plan.instances)
        typer.echo(
            f"{spec}: ok: {plan.name}, phase {plan.phase} on {plan.target}, "
            f"{n} {'unit' if n == 1 else 'units'} planned (vLLM {plan.release.version})"
        )
