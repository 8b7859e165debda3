"""`pdctl scale SPEC ROLE=N`: start or stop instances of one role on the spec's hosts."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import typer

from pdctl import actions, inputs
from pdctl.cli import term
from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.options import (
    DEPLOYED_PHASE,
    FACTS,
    SPEC,
    TARGET,
    check_output,
    check_phase_target,
    output_option,
)
from pdctl.cli.progress import ConsoleProgress, failed_run
from pdctl.cli.scaling import (
    BUNDLE,
    DRAIN_TIMEOUT,
    NEW_TIMEOUT,
    scaled_loader,
    with_bundle,
)
from pdctl.cli.secret_values import read_secrets
from pdctl.cli.specfile import spec_texts, with_overlays
from pdctl.scale import Scaled, check_request, parse_request, scale


@with_overlays
@connection()
def scale_cmd(
    conn: ConnectFlags, spec: str = SPEC,
    count: str = typer.Argument(
        ..., metavar="ROLE=N",
        help="The role (serve; prefill or decode) and its new instance count."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Connect, show what would start and stop, change nothing."),
    timeout: int = NEW_TIMEOUT, drain_timeout: int = DRAIN_TIMEOUT,
    output: str = output_option("table, or json (what was done)."),
    phase: int | None = DEPLOYED_PHASE, target: str | None = TARGET, facts: Path | None = FACTS,
    wheels: Path | None = BUNDLE,
) -> None:
    """Set ROLE's instance count on SPEC's hosts: start new instances and add them to the
    router, or take instances out of the router, drain and stop them."""
    check_output(output)
    role, n = parse_request(count)
    check_phase_target(phase, target)
    texts = spec_texts(spec)
    found = None
    if facts is not None:
        found = inputs.read_facts(facts, inputs.read_spec(texts)[0])

    load = scaled_loader(texts, phase, target, found, count)
    options = conn.target(dry_run=dry_run)
    deployed_plan, deployed = load({})
    check_request(deployed_plan, actions.kind_of(deployed_plan, options), role, n)
    console = term.console(stderr=output == "json", log_path=False)
    load, prepare = with_bundle(load, deployed_plan, wheels, options, console)
    if prepare is not None:  # what runs was rendered from the bundle
        deployed_plan, deployed = load({})
    progress = ConsoleProgress(console)
    try:
        done = scale(load, deployed, role, n, options, progress,
                     lambda: read_secrets(deployed_plan), dry_run, float(timeout),
                     float(drain_timeout), prepare=prepare)
    except actions.UpFailed as exc:
        raise failed_run(console, exc, "scale") from None
    if output == "json":
        sys.stdout.write(json.dumps(_document(deployed_plan.name, done), indent=2) + "\n")
        return
    for line in _lines(done, dry_run):
        console.print(line, highlight=False, markup=False)


def _document(name: str, done: Scaled) -> dict[str, object]:
    return {"name": name, **asdict(done)}


def _lines(done: Scaled, dry_run: bool) -> list[str]:
    m = done.moves
    if not m.start and not m.stop and not done.added and not done.removed:
        return [f"{done.role} already runs {done.count} instance(s): nothing to do"]
    if dry_run:
        return [f"would start {u}" for u in m.start] + [
            f"would take {u} out of the router, drain it and stop it" for u in m.stop
        ] + [f"would restart {u} with the new members (P/D router)" for u in m.restart]
    out = [f"took {u} out of the router" for u in done.removed]
    out += [f"{u}: {how}; stopped" for u, how in done.drained.items()]
    out += [f"stopped {u}" for u in m.stop if u not in done.drained]
    out += [f"started {u}" for u in m.start]
    out += [f"restarted {u} with the new members (P/D router)" for u in m.restart]
    out += [f"the router now sends to {u}" for u in done.added]
    return out + [f"{done.role}: {done.count} instance(s)"]
