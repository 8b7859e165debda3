"""`pdctl autoscale SPEC`: the spec's `autoscaling` policy run against its deployment on SSH
hosts (docs/autoscaling.md, "pdctl autoscale"). Each round reads how many instances of each
role run, one window of the engines' metrics through the target's observe face (as `pdctl
top`), decides (pdctl.autoscale.policy.decide), logs every decision with its evidence and
applies each change with `pdctl scale`'s action."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from pdctl import actions
from pdctl.autoscale import live
from pdctl.autoscale.policy import decide
from pdctl.cli import term
from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.options import (
    DEPLOYED_PHASE,
    SPEC,
    TARGET,
    check_output,
    check_phase_target,
    output_option,
    seconds_of,
)
from pdctl.cli.progress import ConsoleProgress
from pdctl.cli.scaling import (
    BUNDLE,
    DRAIN_TIMEOUT,
    NEW_TIMEOUT,
    scaled_loader,
    with_bundle,
)
from pdctl.cli.secret_values import read_secrets
from pdctl.cli.specfile import spec_texts, with_overlays
from pdctl.errors import PdctlError, SpecError, UsageError

if TYPE_CHECKING:
    from pdctl.autoscale.policy import RoleRule
    from pdctl.plan.model import Plan
    from pdctl.render.bundle import Bundle
    from pdctl.scale import Load
    from pdctl.targets.base import Connect


def _state_path(name: str, given: Path | None) -> Path:
    if given is not None:
        return given
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "pdctl" / f"autoscale-{name}.json"


def _read_state(path: Path) -> dict[str, float]:
    """When each role last scaled (epoch seconds): the cooldowns hold across --once runs and
    restarts of the supervised process."""
    try:
        got = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not autoscale state ({exc})", fix="remove the file") from None
    last = got.get("last_action", {}) if isinstance(got, dict) else {}
    return {str(k): float(v) for k, v in last.items() if isinstance(v, int | float)}


def _write_state(path: Path, last: dict[str, float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"last_action": last}, indent=2) + "\n")


@with_overlays
@connection()
def autoscale_cmd(
    conn: ConnectFlags, spec: str = SPEC,
    once: bool = typer.Option(False, "--once", help="Run one round (decide, apply), exit."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Decide and print the decisions; change nothing."),
    interval: str = typer.Option(
        "30s", "--interval", metavar="DURATION",
        help="Time between rounds (30s, 5m; a plain number is seconds; at most 24h)."),
    window: str = typer.Option(
        "10s", "--window", "-w", metavar="DURATION",
        help="Time each round reads the engines' metrics over, as `pdctl top --window` "
        "(rates need two reads; at most 1h)."),
    state_file: Path | None = typer.Option(
        None, "--state", metavar="FILE",
        help="Where the time of each role's last scale action is kept (the cooldowns); "
        "default $XDG_STATE_HOME/pdctl/autoscale-NAME.json."),
    timeout: int = NEW_TIMEOUT, drain_timeout: int = DRAIN_TIMEOUT,
    unit: bool = typer.Option(
        False, "--unit",
        help="Print a systemd unit that runs this command supervised (Restart=always); "
        "run nothing."),
    output: str = output_option(
        "table (one line a decision), or json (one JSON object a line)."),
    phase: int | None = DEPLOYED_PHASE, target: str | None = TARGET,
    wheels: Path | None = BUNDLE,
) -> None:
    """Scale SPEC's roles on its SSH hosts with the spec's `autoscaling` policy: every
    interval read the engines' metrics, decide (hysteresis, cooldowns, GPU budget), log
    each decision with its evidence and apply it as `pdctl scale` does."""
    check_output(output)
    check_phase_target(phase, target)
    window_s = seconds_of(window, "--window")
    interval_s = seconds_of(interval, "--interval", 86400)
    texts = spec_texts(spec)
    load = scaled_loader(texts, phase, target, None, "autoscale")
    options = conn.target()
    plan, deployed = load({})
    if plan.spec.autoscaling is None:
        raise SpecError("the spec has no autoscaling section", path="autoscaling",
                        fix="add autoscaling: with the roles to scale (docs/autoscaling.md)")
    from pdctl.plan.autoscale import targets
    from pdctl.render.kube_autoscale import capacity
    from pdctl.scale import check_request

    rules = live.rules(targets(plan, capacity(plan)))
    for rule in rules:
        check_request(plan, actions.kind_of(plan, options), rule.role, rule.min_replicas)
    if unit:
        argv = sys.argv[sys.argv.index("autoscale") + 1:]
        argv = [str(Path(a).resolve()) if a == spec else a for a in argv if a != "--unit"]
        typer.echo(live.unit_text(plan.name, [sys.executable, "-m", "pdctl", "autoscale",
                                              *argv], str(Path.cwd())), nl=False)
        return
    max_gpus = plan.spec.autoscaling.max_gpus
    console = term.console(stderr=True, log_path=False)
    load, prepare = with_bundle(load, plan, wheels, options, console)
    if prepare is not None:  # what runs was rendered from the bundle
        plan, deployed = load({})
    path = _state_path(plan.name, state_file)
    while True:
        try:
            _round(load, deployed, rules, options, path, window_s, max_gpus, dry_run,
                   output, ConsoleProgress(console), float(timeout), float(drain_timeout),
                   prepare)
        except PdctlError as exc:  # supervised: say why, try again next round
            if once:
                raise
            console.print(f"round failed: {exc.line()}", highlight=False, markup=False)
        if once:
            return
        time.sleep(interval_s)


def _round(load: Load, deployed: Bundle, rules: tuple[RoleRule, ...], options: Connect,
           path: Path, window_s: float, max_gpus: int | None, dry_run: bool, output: str,
           progress: ConsoleProgress, timeout: float, drain_timeout: float,
           prepare: Callable[[Plan, set[str]], None] | None = None) -> None:
    """One round: what runs, one window of its metrics, the decisions (each printed with its
    evidence), then each change applied."""
    from pdctl.scale import running_counts, scale
    from pdctl.top.source import open_source

    roles = [r.role for r in rules]
    counts = running_counts(load, options, roles)
    plan, bundle = load(counts)
    source = open_source(plan, bundle, options)
    try:
        first = source.scrape()
        time.sleep(window_s)
        w = source.window(first, source.scrape(), [], [])
    finally:
        source.close()
    sums, busy, seen = live.observed(rules, w.instances)
    last = _read_state(path)
    now = time.time()
    decisions = decide(rules, sums, counts, last, now, max_gpus, busy=busy)
    at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for d in decisions:
        doc = live.evidence(d, seen.get(d.role, {}), at)
        doc["dry_run"] = dry_run
        _emit(doc, output)
    if dry_run:
        return
    for d in live.steps(decisions):
        done = scale(load, deployed, d.role, d.replicas, options, progress,
                     lambda: read_secrets(plan), False, timeout, drain_timeout, others=counts,
                     prepare=prepare)
        counts[d.role] = d.replicas
        last[d.role] = time.time()
        _write_state(path, last)
        _emit({"role": d.role, "applied": True, "replicas": d.replicas, "started":
               list(done.moves.start), "stopped": list(done.moves.stop), "added": done.added,
               "removed": done.removed, "drained": done.drained,
               "restarted": list(done.moves.restart)}, output)


def _emit(doc: dict[str, Any], output: str) -> None:
    if output == "json":
        text = json.dumps(doc)
    elif "applied" in doc:
        moved = [f"started {', '.join(doc['started'])}" if doc["started"] else "",
                 f"stopped {', '.join(doc['stopped'])}" if doc["stopped"] else "",
                 f"restarted {', '.join(doc['restarted'])}" if doc["restarted"] else ""]
        text = f"applied {doc['role']}={doc['replicas']}: " + "; ".join(m for m in moved if m)
    else:
        text = live.line(doc)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
