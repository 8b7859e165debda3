"""`pdctl preflight`: can this spec run here, and will it use the GPUs well?"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn
from rich.table import Table

from pdctl.cli import term
from pdctl.cli.connect import ConnectFlags, connection, must_exist
from pdctl.cli.options import (
    SPEC,
    TARGET,
    check_output,
    check_phase_target,
    output_option,
    phase_option,
)
from pdctl.cli.specfile import plan_from, with_overlays
from pdctl.errors import UsageError
from pdctl.inputs import read_model_config
from pdctl.offline import manifest as mf
from pdctl.offline.ship import bundled
from pdctl.plan.model import Plan
from pdctl.plan.topology import plan_hosts
from pdctl.preflight import bundle
from pdctl.preflight import record as rec
from pdctl.preflight.bundle import Wanted
from pdctl.preflight.facts import CLUSTER
from pdctl.preflight.finding import Finding, worst
from pdctl.preflight.registry import facts_from, gather, run_checks, steps
from pdctl.preflight.run import Bounds, Options
from pdctl.render.bundle import Bundle
from pdctl.spec.source import Source

STYLE = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red"}

PREFLIGHT_PHASE = phase_option("Check the hosts for this phase instead of the spec's.")


def _hf_config(plan: Plan, spec_path: str, source: Source) -> dict[str, Any] | None:
    ref = plan.spec.model.config
    return read_model_config(ref, spec_path, source) if ref else None


def _gather(plan: Plan, options: Options, quiet: bool) -> dict[str, dict[str, str]]:
    console = term.console(stderr=True)
    if quiet or not console.is_terminal:
        return gather(plan, options)
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"), console=console, transient=True,
    ) as progress:
        tasks = {name: progress.add_task(f"gathering {name}", total=total, last="")
                 for name, total in steps(plan, options).items()}

        def step(host: str, file: str) -> None:
            if host in tasks:
                progress.update(tasks[host], advance=1, last=file)

        return gather(plan, options, step)


UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 1000,
         "mb": 1000**2, "gb": 1000**3}


def _size(text: str) -> int:
    """`--transfer-bytes`: 1048576, 64MiB, 1GiB, 500MB."""
    m = re.fullmatch(r"\s*([0-9]+)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in UNITS:
        raise UsageError(f"--transfer-bytes: {text!r} is not a size",
                         fix="write bytes, or a number with KiB, MiB or GiB (e.g. 256MiB)")
    size = int(m.group(1)) * UNITS[unit]
    if not 4096 <= size <= 64 << 30:
        raise UsageError(f"--transfer-bytes: {text} is out of range",
                         fix="give between 4KiB and 64GiB")
    return size


NARROW = 110  # columns: under this (a terminal or COLUMNS) each finding is a block of lines


def _table(findings: tuple[Finding, ...], console: Console) -> None:
    """The findings as one table, or on a narrow terminal (80 columns) as one block each: a
    six-column table there cuts checks, hosts and paths into pieces of a few characters."""
    if term.sized(sys.stdout) and console.width < NARROW:
        for f in findings:
            console.print(f"[{STYLE[f.status]}]{f.status}[/] [bold]{f.check}[/] {f.where}",
                          highlight=False)
            block = Table.grid(padding=(0, 1))
            block.add_column(no_wrap=True, style="dim")
            block.add_column(overflow="fold")
            for label, value in (("found", f.found), ("expected", f.expected), ("fix", f.fix)):
                if value:
                    block.add_row(f"  {label}:", value)
            console.print(block, highlight=False)
        return
    table = Table(show_lines=False, header_style="bold")
    for col in ("status", "check", "host/node", "found", "expected", "fix"):
        table.add_column(col, overflow="fold")
    for f in findings:
        table.add_row(
            f"[{STYLE[f.status]}]{f.status}[/]", f.check, f.where, f.found, f.expected, f.fix)
    console.print(table)


def _bundle_of(plan: Plan, folder: Path) -> tuple[Wanted, Bundle]:
    """The bundle checked as `up --bundle` checks it (every file's sha256, the spec's
    requirements carried): (what it asks of a host, the scripts rendered from it)."""
    _, rendered, manifest = bundled(plan, folder)
    wheels, weights = (sum(e.size for e in manifest.part(top).values())
                       for top in ("wheels", "weights"))
    sizes = {e.path: e.size for e in manifest.files}
    images = tuple((ref, image_id, sizes[file]) for ref, image_id, file in manifest.images)
    placed = tuple((e.path, e.size) for top in ("wheels", "weights")
                   for e in manifest.part(top).values())
    adapters = sum(e.size for e in manifest.part(mf.ADAPTERS).values())
    return Wanted(manifest.python, manifest.platform, wheels, str(folder), weights,
                  images, placed, adapters), rendered


@with_overlays
@connection(docker=False)
def preflight(
    conn: ConnectFlags, spec: str = SPEC,
    output: str = output_option(),
    record: Path | None = typer.Option(
        None, "--record", metavar="DIR",
        help="Save every raw output gathered under DIR (one folder per "
        "host, _kubernetes/ for the cluster)."),
    replay: Path | None = typer.Option(
        None, "--replay", metavar="DIR",
        help="Check a recording (DIR from --record, or real outputs "
        "named like it) instead of gathering."),
    local: list[str] = typer.Option(
        [], "--local", metavar="NAME",
        help="Probe host NAME on this machine, without SSH (repeatable). "
        "Hosts with address `localhost` are probed locally too."),
    remote_path: list[str] = typer.Option(
        [], "--remote-path", metavar="DIR",
        help="Prepend DIR to PATH on hosts (nvidia-smi, docker or "
        "conda outside the non-interactive PATH; repeatable)."),
    concurrency: int | None = typer.Option(
        None, "--concurrency", min=1, hidden=True, help="Deprecated: --parallel."),
    no_transfer: bool = typer.Option(
        False, "--no-transfer",
        help="Phase 2: skip the network preflight (the short KV transfer from each "
        "prefill host to each decode host)."),
    transfer_bytes: str = typer.Option(
        "256MiB", "--transfer-bytes", metavar="SIZE",
        help="Phase 2: at most SIZE bytes per transfer (e.g. 64MiB, 1GiB)."),
    transfer_seconds: float = typer.Option(
        5.0, "--transfer-seconds", min=0.1, max=600, metavar="S",
        help="Phase 2: at most S seconds of transfer per pair (start-up not counted)."),
    wheels: Path | None = typer.Option(
        None, "--bundle", metavar="DIR",
        help="Check the hosts against a `pdctl bundle` folder too: its files (sha256), "
        "the hosts' Python, glibc and machine against its wheels, free disk in dataDir; "
        "on docker hosts the engine, the images there and room to load the rest "
        "(docs/offline.md)."),
    phase: int | None = PREFLIGHT_PHASE, target: str | None = TARGET,
) -> None:
    """Check hosts or the cluster against SPEC before deploying: GPUs, topology, driver,
    MIG, RDMA, /dev/shm, runtime, disk, ports, model fit; in phase 2 on hosts, a short KV
    transfer from each prefill host to each decode host. Exit 1 when anything FAILs."""
    check_phase_target(phase, target)
    check_output(output)
    if record is not None and replay is not None:
        raise UsageError("--record and --replay exclude each other")
    bounds = None if no_transfer else Bounds(_size(transfer_bytes), transfer_seconds)
    plan, source = plan_from(spec, phase, target)
    hf_config = _hf_config(plan, spec, source)
    checked = None if wheels is None else _bundle_of(plan, wheels)  # before gathering
    names = tuple(h.name for h in plan_hosts(plan))
    unknown = sorted(set(local) - {h.name for h in plan.spec.hosts})
    if unknown:
        raise UsageError(f"--local {unknown[0]}: no host of that name in the spec")
    if replay is not None:
        raw = rec.read(replay, names)
        if plan.on_kubernetes and CLUSTER not in raw:
            raise UsageError(f"{replay} has no {CLUSTER}/ folder for the cluster")
    else:
        if plan.on_kubernetes and conn.kubeconfig:  # as up: a named file must exist
            must_exist(conn.kubeconfig, "kubeconfig file", "check --kubeconfig")
        options = Options(
            ssh=conn.ssh(), local=frozenset(local), remote_path=tuple(remote_path),
            concurrency=concurrency or conn.parallel, kubeconfig=conn.kubeconfig,
            context=conn.context, transfer=bounds)
        raw = _gather(plan, options, quiet=output == "json")
        if record is not None:
            rec.write(record, raw)
            typer.echo(f"recorded raw outputs under {record}", err=True)
    facts = facts_from(raw)
    findings = run_checks(plan, facts, hf_config, transfer=not no_transfer)
    if checked is not None:
        findings += bundle.findings(plan, raw, *checked)
    status = worst(findings)
    counts = {s: sum(1 for f in findings if f.status == s) for s in ("PASS", "WARN", "FAIL")}
    if output == "json":
        doc = {"spec": plan.name, "phase": plan.phase, "target": plan.target, "status": status,
               "counts": counts, "findings": [f.__dict__ for f in findings]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        console = term.console()
        _table(findings, console)
        console.print(
            f"{counts['PASS']} PASS, {counts['WARN']} WARN, {counts['FAIL']} FAIL: {status}",
            highlight=False)
    if status == "FAIL":
        sys.exit(1)  # SystemExit passes click (standalone_mode=False drops Exit codes)
