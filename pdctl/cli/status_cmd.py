"""`pdctl status`: one row per instance: where, role, pid/container/pod, health, model."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from pdctl import actions
from pdctl.cli import term
from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.options import (
    DEPLOYED_BUNDLE,
    DEPLOYED_PHASE,
    FACTS,
    SPEC,
    TARGET,
    check_output,
    output_option,
)
from pdctl.cli.specfile import load, with_overlays
from pdctl.cli.summary import degrade, status_counts, status_line
from pdctl.errors import PdctlError
from pdctl.top.source import open_source

if TYPE_CHECKING:
    from pdctl.plan.model import Plan


@with_overlays
@connection()
def status(
    conn: ConnectFlags, spec: str = SPEC,
    output: str = output_option(),
    phase: int | None = DEPLOYED_PHASE, target: str | None = TARGET, facts: Path | None = FACTS,
    verify: bool = typer.Option(
        False, "--verify",
        help="Also run the quick P/D canary (phases 2 and 3 on SSH hosts) and print its "
        "verdict, naming the prefill -> decode pair when it fails (exit 1)."),
    wheels: Path | None = DEPLOYED_BUNDLE,
) -> None:
    """Show every instance of SPEC and whether it is healthy.

    A router with no healthy engine of a role behind it is `degraded`."""
    check_output(output)
    plan, bundle = load(spec, phase, target, facts, wheels)  # as `up --facts --bundle` had
    if verify:
        from pdctl.bench.run import check_verify

        check_verify(plan)
    found, unreachable = actions.status(plan, bundle, conn.target())
    rows = degrade([asdict(r) for r in found], router_views(plan, bundle, conn, found))
    failed = None
    if unreachable:  # the rows say `unreachable`; the exit status and stderr say why
        failed = PdctlError("cannot reach " + "; ".join(unreachable.values()))
    canary = None
    if verify:
        from pdctl.bench.canary import verdict_line
        from pdctl.bench.run import quick_canary

        try:
            v = quick_canary(plan, bundle, conn.ssh())
            canary = {"ok": v.ok, "verdict": verdict_line(v), "failedPairs": v.failed_pairs}
        except PdctlError as exc:  # e.g. a host lost: the canary could not run
            canary = {"ok": False, "verdict": f"P/D canary failed: {exc.line()}",
                      "failedPairs": []}
        if not canary["ok"]:
            failed = PdctlError(str(canary["verdict"]))
    if output == "json":
        gone = [{"host": h, "error": why} for h, why in unreachable.items()]
        doc: dict[str, Any] = {"name": plan.name, "instances": rows, "unreachable": gone}
        if canary is not None:
            doc["canary"] = canary
        typer.echo(json.dumps({**doc, "summary": status_counts(rows)}, indent=2))
        if failed:
            raise failed
        return
    table = Table(title=f"{plan.name} (phase {plan.phase}, {plan.target})")
    columns = ["host", "unit", "role", "pid", "state", "supervisor", "health", "model",
               "endpoint", "why"]
    # A column nothing fills (a pod has no pid, Kubernetes no endpoint) is left out.
    columns = [c for c in columns if c in ("host", "unit", "role", "state")
               or any(row[c] not in ("", "-") for row in rows)]
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*(str(row[c]) for c in columns))
    console = term.console()
    console.print(table)
    console.print(status_line(rows), markup=False)
    if canary is not None:
        console.print(str(canary["verdict"]), markup=False, highlight=False)
    bare = sorted({r["host"] for r in rows if r["supervisor"] == "nohup"})
    if bare:  # nothing restarts these: said once, under the table
        console.print(
            f"warning: units on {', '.join(bare)} run under nohup: nothing restarts one "
            "that dies (no systemd there, or supervise: none; see docs/phase0-hosts.md)")
    if any("(outdated)" in str(r["state"]) for r in rows):
        console.print(outdated_note(plan), markup=False, highlight=False)
    if failed:
        raise failed


def outdated_note(plan: Plan) -> str:
    """Said under a table with outdated units: what shows the difference, what replaces them,
    and (on hosts) the `--bundle DIR` a deployment started from a bundle needs here too."""
    flag = " --bundle DIR" if plan.bundled else ""
    note = (f"note: outdated units run other scripts than the spec renders: `pdctl diff{flag}` "
            f"shows how, `pdctl up{flag}` replaces them")
    if plan.bundled or plan.on_kubernetes:
        return note
    return note + "; one started with `up --bundle DIR` takes --bundle DIR here too"


def router_views(plan: Any, bundle: Any, conn: ConnectFlags, rows: list) -> dict:
    """What each running, live router says of its workers (GET /readiness, SSH hosts only):
    router unit -> role -> (healthy, total); {} where no router runs or none answers."""
    if getattr(plan, "target", None) != "hosts" or not any(
        r.role == "router" and r.health == "healthy" for r in rows
    ):
        return {}

    try:
        source = open_source(plan, bundle, conn.target())
    except PdctlError:  # the rows already say what cannot be reached
        return {}
    try:
        return source.router_readiness()
    finally:
        source.close()
