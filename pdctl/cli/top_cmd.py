"""`pdctl top`: the running deployment's figures, GPU telemetry and verdicts, live or once."""

from __future__ import annotations

import contextlib
import json
import select
import sys
import time
from collections import deque
from typing import Any

import typer
from rich.live import Live

from pdctl.cli import term
from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.options import DEPLOYED_PHASE, SPEC, TARGET, check_output, output_option, seconds_of
from pdctl.cli.specfile import load, with_overlays
from pdctl.errors import PdctlError, UsageError
from pdctl.plan.model import Plan
from pdctl.top.dashboard import render
from pdctl.top.gpu import GpuLoad
from pdctl.top.kv_events import KvEvent, new_lines, peers_of, scan
from pdctl.top.packing import Packing
from pdctl.top.source import Source, open_source
from pdctl.top.verdict import Verdict, verdicts
from pdctl.top.window import Window, as_dict

KEYS_HINT = "keys: + / - double or halve the window, q or Ctrl-C quits"


@with_overlays
@connection()
def top(
    conn: ConnectFlags, spec: str = SPEC,
    once: bool = typer.Option(False, "--once", help="Read one window, print it, exit."),
    window: str = typer.Option("60s", "--window", "-w", metavar="DURATION",
                               help="The window figures are taken over (60s, 2m)."),
    refresh: str = typer.Option(
        "2s", "--refresh", metavar="DURATION", help="How often the live dashboard reads (2s)."),
    output: str = output_option("table or json (--once)."),
    canary: bool = typer.Option(
        False, "--canary",
        help="First run the quick P/D canary (phases 2 and 3 on SSH hosts) and show its "
        "verdict; with --once, exit 1 when it fails."),
    phase: int | None = DEPLOYED_PHASE, target: str | None = TARGET,
) -> None:
    """Show how the running deployment of SPEC uses its GPUs: per instance requests,
    tokens/s, TTFT/ITL, KV cache, KV transfer; per GPU SM, DRAM bandwidth and tensor
    activity; and verdicts (which phase or setting to move to)."""
    check_output(output)
    if output == "json" and not once:
        raise UsageError("-o json prints one window: add --once")
    window_s = seconds_of(window, "--window")
    refresh_s = seconds_of(refresh, "--refresh")
    plan, bundle = load(spec, phase, target)
    checked: tuple[bool, str] | None = None
    if canary:
        from pdctl.bench.canary import verdict_line
        from pdctl.bench.run import check_verify, quick_canary

        check_verify(plan, "--canary")
        v = quick_canary(plan, bundle, conn.ssh())
        checked = (v.ok, verdict_line(v))

    source = open_source(plan, bundle, conn.target())
    try:
        if not once:
            _live(plan, source, window_s, refresh_s, spec, checked)
            return
        w, found = _once(plan, source, window_s, spec, checked)
    finally:
        source.close()
    _print_once(w, found, output)
    failed = [f"{f.name}: {f.error}" for f in w.instances if f.error]
    if checked is not None and not checked[0]:
        failed.insert(0, checked[1])
    failed += [f"cannot reach {why}" for why in source.unreachable.values()]
    if failed:
        raise PdctlError("; ".join(failed[:3]) + ("; ..." if len(failed) > 3 else ""))


def _log_events(plan: Plan, source: Source, before: dict[str, str], after: dict[str, str]
                ) -> list[KvEvent]:
    """The suspect KV lines each engine logged between two reads of its log tail."""
    names = source.names()
    out: list[KvEvent] = []
    for e in source.endpoints:
        if e.role in ("prefill", "decode"):
            text = new_lines(before.get(e.name, ""), after.get(e.name, ""))
            out += scan(e.name, e.role, text, names, peers_of(plan))
    return out


def _once(plan: Plan, source: Source, window_s: float, spec_file: str,
          checked: tuple[bool, str] | None = None) -> tuple[Window, list[Verdict]]:
    logs = source.logs(2000)
    first = source.scrape()
    gpus, missing = source.gpus(window_s)  # samples the GPUs over the window itself
    last = source.scrape()
    events = _log_events(plan, source, logs, source.logs(2000)) if logs else []
    w = source.window(first, last, gpus, missing)
    found = verdicts(w, packed=_packed(spec_file, plan, gpus), events=events, canary=checked,
                     peers=peers_of(plan), cpu=_cpu(plan))
    return w, found


def _cpu(plan: Plan) -> bool:
    """The engines run on CPU (engine.device: cpu): no GPU plan, no GPU-based verdicts."""
    return bool(plan.spec.engine.device == "cpu")


def _packed(spec_file: str, plan: Plan, gpus: list[GpuLoad]) -> dict[int, Packing]:
    """What `pdctl plan` predicts for decode packed N per GPU (top.packing), for the phase 3
    verdict: the spec's model on the spec's GPU (hardware.gpu, decode.share.gpuType), else the
    one GPU type the telemetry names; {} where either is unknown."""
    if _cpu(plan):  # GPU capacity planning does not apply
        return {}
    try:
        from pdctl import capacity as cap
        from pdctl.inputs import read_model_config
        from pdctl.top.packing import packings

        spec = plan.spec
        gpu, origin = cap.spec_gpu(spec)
        if origin == cap.ASSUMED:
            names = {g.name for g in gpus if g.name}
            if len(names) != 1:
                return {}
            gpu = cap.find_gpu(names.pop())
        config = read_model_config(spec.model.config, spec_file) if spec.model.config else None
        model = cap.spec_model_config(spec.model, config)
        shape = cap.spec_shape(spec, "decode" if plan.disaggregated else "serve")
        traffic = cap.spec_traffic(spec)
        return packings(model, gpu, shape, traffic)
    except PdctlError:
        return {}


def _print_once(w: Window, found: list[Verdict], output: str) -> None:
    if output == "json":
        doc = as_dict(w)
        doc["verdicts"] = [{"key": v.key, "line": v.line} for v in found]
        typer.echo(json.dumps(doc, indent=2))
        return

    console = term.console()

    # piped with no COLUMNS: every table whole (term.console), so the wide dashboard
    console.print(render(w, found, width=console.width if term.sized(sys.stdout) else None))


def _live(plan: Plan, source: Source, window_s: float, refresh_s: float, spec_file: str,
          checked: tuple[bool, str] | None = None) -> None:
    history: deque[dict[str, Any]] = deque()
    seen: deque[tuple[float, KvEvent]] = deque()  # (when, suspect KV event) within the window
    logs = source.logs(300)
    packed: dict[int, Packing] | None = None
    keys = _Keys()
    console = term.console()
    try:
        # not a terminal (a pipe, a log file): each frame printed after the last
        live: Any = Live(console=console, auto_refresh=False) if console.is_terminal else None
        with keys, live if live is not None else contextlib.nullcontext():
            history.append(source.scrape())
            while True:
                gpus, missing = source.gpus(refresh_s)
                now = source.scrape()
                history.append(now)
                newest = max((s.at for s in now.values()), default=time.monotonic())
                while (len(history) > 2
                       and _oldest(history[1]) >= 0
                       and (newest - _oldest(history[1]) >= window_s)):
                    history.popleft()
                w = source.window(history[0], now, gpus, missing)
                if packed is None:
                    packed = _packed(spec_file, plan, gpus)
                if logs:
                    fresh = source.logs(300)
                    seen.extend((newest, e) for e in _log_events(plan, source, logs, fresh))
                    logs = fresh or logs
                while seen and newest - seen[0][0] > window_s:
                    seen.popleft()
                found = verdicts(w, packed=packed, events=[e for _, e in seen],
                                 canary=checked, peers=peers_of(plan), cpu=_cpu(plan))
                frame = render(w, found, f"{KEYS_HINT} (window {window_s:.0f}s)", console.width)
                if live is not None:
                    term.fit(frame, console)  # Live renders past the console's print hook
                    live.update(frame, refresh=True)
                else:
                    console.print(frame)
                    console.file.flush()
                key = keys.read()
                if key in ("q", "Q"):
                    return
                if key == "+":
                    window_s = min(window_s * 2, 3600.0)
                elif key == "-":
                    window_s = max(window_s / 2, refresh_s)
    except KeyboardInterrupt:  # Ctrl-C leaves cleanly: the terminal restored, exit 0
        return


def _oldest(snaps: dict[str, Any]) -> float:
    return min((s.at for s in snaps.values()), default=-1.0)


class _Keys:
    """Single key presses from a terminal stdin (cbreak mode), restored on exit."""

    def __init__(self) -> None:
        self.saved: Any = None

    def __enter__(self) -> _Keys:
        if sys.stdin.isatty():
            import termios
            import tty

            self.saved = termios.tcgetattr(sys.stdin)
            tty.setcbreak(sys.stdin)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            import termios

            termios.tcsetattr(sys.stdin, termios.TCSADRAIN, self.saved)

    def read(self) -> str:
        if self.saved is None:
            return ""
        ready, _, _ = select.select([sys.stdin], [], [], 0)
        out = ""
        while ready:
            out = sys.stdin.read(1)
            ready, _, _ = select.select([sys.stdin], [], [], 0)
        return out
