"""`pdctl validate`: check a spec (and that it plans and renders) without writing anything."""

from __future__ import annotations

import typer

from pdctl.cli import options
from pdctl.cli.options import PHASE, SPEC, STRICT, TARGET, check_phase_target
from pdctl.cli.specfile import plan_from, warn, with_overlays
from pdctl.cli.summary import counted, endpoints_hint, planned
from pdctl.inputs import render_plan
from pdctl.plan.place import where


@with_overlays
def validate(
    spec: str = SPEC, phase: int | None = PHASE, target: str | None = TARGET,
    strict: bool = STRICT,
    output: str = options.output_option(
        "text, or json: the summary as one document on stdout (a bad spec still "
        "exits 2 with its error lines on stderr).", "text"),
) -> None:
    """Check SPEC: one line per problem (file:line: field: what; fix), exit 2 when bad.

    A role that does not fit on the spec's GPU is a warning on stderr (exit 1 with
    --strict): vLLM would refuse to start it. So is a network setting that may not work
    where it runs (an RDMA-only transport on a host without rdmaDevices)."""
    check_phase_target(phase, target)
    options.check_output(output, "text", "json")
    plan, source = plan_from(spec, phase, target)
    cautions, warnings = warn(spec, plan, strict, source)

    hint = endpoints_hint(plan)  # several replicas, no router: N endpoints (a warning)
    if hint is not None:
        typer.echo(f"{spec}: warning: {hint}", err=True)

    # what `up` would start: the count `up --dry-run` lists (objects: rendered)
    bundle = render_plan(plan, source) if plan.on_kubernetes else None
    word, names = planned(plan, bundle)
    if output == "json":
        import json

        doc = {"spec": spec, "valid": True, "name": plan.name, "phase": plan.phase,
               "target": plan.target, "engine": plan.release.version, f"{word}s": names,
               "warnings": [*plan.notes, *cautions, *warnings, *([hint] if hint else [])]}
        typer.echo(json.dumps(doc, indent=2))
        return
    typer.echo(f"{spec}: ok: {plan.name}, phase {plan.phase} on {plan.target}, "
               f"{counted(len(names), word)} planned (vLLM {plan.release.version})"
               + (f", {len(warnings)} capacity warning(s)" if warnings else ""))

    for line in where(plan):  # where each instance goes (docs/placement.md)
        typer.echo(f"  {line}")
