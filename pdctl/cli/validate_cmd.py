"""`pdctl validate`: check a spec (and that it plans and renders) without writing anything."""

from __future__ import annotations

import typer

from pdctl.cli import options
from pdctl.cli.options import SPEC, STRICT, TARGET, check_phase_target, phase_option
from pdctl.cli.specfile import note_lines, plan_from, shown, warn, with_overlays
from pdctl.cli.summary import counted, endpoints_hint, planned
from pdctl.inputs import render_plan
from pdctl.plan.place import where

VALIDATE_PHASE = phase_option("Check the spec at this phase instead of the spec's.")


@with_overlays
def validate(
    spec: str = SPEC, phase: int | None = VALIDATE_PHASE, target: str | None = TARGET,
    strict: bool = STRICT,
    output: str = options.output_option(
        "text, or json: the summary as one document on stdout (a bad spec still "
        "exits 2 with its error lines on stderr).", "text"),
) -> None:
    """Check SPEC: one line per problem (file:line: field: what; fix), exit 2 when bad.

    A role that does not fit on the spec's GPU is a warning on stderr (exit 1 with
    --strict): vLLM would refuse to start it. So is a setting that may not work where it
    runs (an RDMA-only transport on a host without rdmaDevices, Mooncake on a vLLM that
    strands requests whose KV pull failed)."""
    check_phase_target(phase, target)
    options.check_output(output, "text", "json")
    plan, source = plan_from(spec, phase, target)
    cautions, warnings = warn(spec, plan, strict, source)
    name = shown(spec)

    hint = endpoints_hint(plan)  # several replicas, no router: N endpoints (a warning)
    hinted = [f"{name}: warning: {hint}"] if hint is not None else []
    for line in hinted:
        typer.echo(line, err=True)

    # what `up` would start: the count `up --dry-run` lists (objects: rendered)
    bundle = render_plan(plan, source) if plan.on_kubernetes else None
    word, names = planned(plan, bundle)
    if output == "json":
        import json

        # Each warning as its line on stderr: `file[:line]: warning: what`.
        doc = {"spec": name, "valid": True, "name": plan.name, "phase": plan.phase,
               "target": plan.target, "engine": plan.release.version, f"{word}s": names,
               "warnings": [*note_lines(name, plan), *cautions, *warnings, *hinted]}
        typer.echo(json.dumps(doc, indent=2))
        return
    typer.echo(f"{name}: ok: {plan.name}, phase {plan.phase} on {plan.target}, "
               f"{counted(len(names), word)} planned (vLLM {plan.release.version})"
               + (f", {len(warnings)} capacity warning(s)" if warnings else ""))

    for line in where(plan):  # where each instance goes (docs/placement.md)
        typer.echo(f"  {line}")
