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
            "its GPU (hardware.gpu), or a network setting that may not work where it runs "
            "(RDMA-only transports on hosts without rdmaDevices, a group led from a host "
            "name), instead of warning.",
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
        --strict): vLLM would refuse to start it. So is a network setting that may not work
        where it runs (an RDMA-only transport on a host without rdmaDevices)."""
        from pdctl.cli.options import check_phase_target
        from pdctl.cli.render_cmd import refuse_strict
        from pdctl.cli.specfile import caution_lines, plan_from
        from pdctl.errors import UsageError
        from pdctl.inputs import capacity_warnings, render_plan

        check_phase_target(phase, target)
        if output not in ("text", "json"):
            raise UsageError(f"--output must be text or json (got {output!r})")
        plan, source = plan_from(spec, phase, target)
        parsed = plan.spec
        for note in plan.notes:
            typer.echo(f"{spec}: warning: {note}", err=True)
        cautions = caution_lines(plan, source)
        for line in cautions:
            typer.echo(line, err=True)
        warnings = capacity_warnings(parsed, spec)
        for line in warnings:
            typer.echo(line, err=True)
        refuse_strict(spec, strict, warnings, cautions)
        from pdctl.cli.summary import counted, planned

        # what `up` would start: the count `up --dry-run` lists (objects: rendered)
        bundle = render_plan(plan, source) if plan.target == "kubernetes" else None
        word, names = planned(plan, bundle)
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
                "warnings": [*plan.notes, *cautions, *warnings],
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
