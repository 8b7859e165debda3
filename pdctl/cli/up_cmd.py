"""`pdctl up`: render, show what will change where, confirm, apply, wait until healthy."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from pdctl import actions
from pdctl.cli import term
from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.options import FACTS, SPEC, TARGET, check_output, output_option, phase_option
from pdctl.cli.progress import ConsoleProgress, failed_run, report_failures, report_undo
from pdctl.cli.secret_values import read_secrets
from pdctl.cli.specfile import load, with_overlays
from pdctl.cli.specfile import shown as spec_name
from pdctl.cli.summary import endpoints_hint
from pdctl.errors import PdctlError, UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from pdctl.plan.model import Plan
    from pdctl.render.bundle import Bundle

UP_PHASE = phase_option("Bring the deployment up at this phase instead of the spec's.")


@with_overlays
@connection()
def up(
    conn: ConnectFlags, spec: str = SPEC,
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    dry_run: bool = typer.Option(
        False, "--dry-run",
        help="Connect, show what would change, and stop (helm's --dry-run=server)."),
    offline: bool = typer.Option(
        False, "--offline",
        help="With --dry-run: do not connect; list what the spec would "
        "start, without comparing with what runs there (helm's --dry-run=client)."),
    keep_going: bool = typer.Option(
        False, "--keep-going",
        help="SSH hosts: on a failure, undo only the failed instances (stop a "
        "new one, bring back the previous version of a replaced one) and go on with the "
        "rest; still exit 1. Without it a failure undoes the whole run."),
    timeout: int = typer.Option(
        900, "--timeout", min=1,
        help="Seconds each stage may take to become healthy; a process unit that has run "
        "longer and does not answer is restarted."),
    output: str = output_option(
        "With --dry-run: table, or json (the changes as one document)."),
    verify: bool = typer.Option(
        False, "--verify",
        help="Once healthy, run the quick P/D canary (phases 2 and 3 on hosts): greedy "
        "prompts through the router and the prefill engine alone must agree; exit 1 if not."),
    phase: int | None = UP_PHASE, target: str | None = TARGET, facts: Path | None = FACTS,
    wheels: Path | None = typer.Option(
        None, "--bundle", metavar="DIR",
        help="Hosts with no package index: install from the wheels of `pdctl bundle` in DIR "
        "(checked first, copied to each host over SSH; docs/offline.md)."),
) -> None:
    """Start SPEC's deployment (or bring it in line with SPEC) and wait until healthy."""
    if offline and not dry_run:
        raise UsageError("--offline works only with --dry-run", fix="add --dry-run")
    check_output(output)
    if output == "json" and not dry_run:
        raise UsageError("-o json prints the changes of a dry run", fix="add --dry-run")
    mode: actions.DryRun = "client" if offline else "server" if dry_run else "none"
    console = term.console(log_path=False)

    plan, bundle = load(spec, phase, target, facts)

    if (hint := endpoints_hint(plan)) is not None:  # N replicas, no router
        typer.echo(f"{spec_name(spec)}: warning: {hint}", err=True)
    if wheels is not None:  # checked before anything connects; scripts install from it
        from pdctl.offline.ship import bundled

        plan, bundle, manifest = bundled(plan, wheels)
    if verify:
        from pdctl.bench.run import check_verify

        check_verify(plan)
    options = conn.target(dry_run=dry_run)
    caps = actions.capabilities_of(plan, options)
    if keep_going and not caps.keep_going:
        raise UsageError(
            f"--keep-going works on SSH hosts only: with {caps.named} a failed run is "
            f"{caps.undo}",
            fix="leave out --keep-going")
    if dry_run and output == "table":
        from pdctl.plan.place import where

        for line in where(plan):  # where each instance goes (docs/placement.md)
            console.print(f"  {line}", highlight=False)
    if output == "json":
        from pdctl.cli.as_json import JsonProgress

        shown = JsonProgress(plan.name)
        actions.up(plan, bundle, options, shown, dict, mode, yes, timeout, keep_going)
        shown.print()
        return
    if wheels is not None and mode == "none":
        from pdctl.offline.ship import ship

        ship(plan, wheels, manifest, options.ssh, options.parallel,
             lambda line: console.print(line, highlight=False, markup=False))
    try:
        done = actions.up(plan, bundle, options, ConsoleProgress(console),
                          lambda: read_secrets(plan), mode, yes, timeout, keep_going)
    except actions.UpFailed as exc:
        raise failed_run(console, exc, "up") from None
    if not done.applied:
        if verify and mode == "none":  # nothing to change: verify what runs
            _verify(plan, bundle, conn, console)
        return
    failures = done.outcome.failures
    if failures:
        report_failures(console, failures)
        report_undo(console, done.outcome)
    if done.kind == "kubernetes":
        console.print("[bold]applied.[/]")
    else:
        console.print("[bold]ready.[/] send requests to:")
        for url in done.endpoints:
            console.print(f"  {url}  (model {plan.served_name})")
        for router in (s for s in plan.services if s.role == "router"):
            behind = ", ".join(u.removesuffix("/health") for u in router.wait_urls)
            console.print(f"  the router sends them on to: {behind}")
    if verify and not failures and not dry_run:
        _verify(plan, bundle, conn, console)
    if failures:
        names = ", ".join(f.unit for f in failures)
        raise PdctlError(f"up failed for {names} (--keep-going went on with the others); "
                         f"{done.outcome.summary()}")


def _verify(plan: Plan, bundle: Bundle, conn: ConnectFlags, console: Console) -> None:
    """The quick canary after `up`; PdctlError naming the prefill -> decode pair when it
    fails (its tokens differ, or an engine logged a suspect KV event)."""
    from pdctl.bench.canary import failed_who, passed_line  # only with --verify
    from pdctl.bench.run import quick_canary

    v = quick_canary(plan, bundle, conn.ssh())
    if not v.ok:
        raise PdctlError(f"verify: the P/D canary failed ({failed_who(v)}): "
                         + "; ".join(v.lines[:3]))
    console.print("verified: " + passed_line(v), highlight=False, markup=False)
