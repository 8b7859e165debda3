"""How `up`, `down`, `status` and `logs` show what the actions do (pdctl.actions.Progress)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from threading import Event
from types import FrameType
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from pdctl.errors import PdctlError
from pdctl.targets.stages import printable

if TYPE_CHECKING:
    from rich.console import RenderableType

    from pdctl.targets.base import Stage, Target
    from pdctl.targets.outcome import Outcome, UnitFailure, UpFailed
    from pdctl.targets.state import Change

STYLES = {"start": "green", "restart": "yellow", "stop": "red", "keep": "dim"}
KUBE_WORDS = {"start": "create", "restart": "update", "keep": "unchanged", "stop": "prune"}


@dataclass
class ConsoleProgress:
    """Steps logged with a time, changes as a table (objects as lines on Kubernetes), a
    confirmation prompt, and while applying where each instance is: on a terminal a live
    table (instance, where, stage, waited/timeout, latest log line), piped a plain line each
    time an instance's stage or latest line changes."""

    console: Console
    stages: dict[str, Stage] = field(default_factory=dict)
    seen_at: dict[str, float] = field(default_factory=dict)  # when each report came
    live: Live | None = None

    def say(self, message: str) -> None:
        if self.live is None and message.endswith(": healthy"):
            # Without the live table each stage is a line, and the one that says "healthy"
            # (with the time waited) follows at once: hosts and Docker engines say it and
            # report it as a stage (hosts/health_wait.py). One line, not two.
            return
        self.console.log(message)

    def stage(self, report: Stage) -> None:
        key = f"{report.unit}@{report.where}"
        seen = self.stages.get(key)
        self.stages[key] = report
        self.seen_at[key] = time.monotonic()
        if self.live is not None:
            self.live.refresh()
            return
        if seen is None or (seen.stage, seen.line) != (report.stage, report.line):
            self.console.print(stage_line(report), markup=False, highlight=False, soft_wrap=True)

    def shown(self) -> RenderableType:
        """The live display: the stage table, or a spinner until the first report (every
        target reports stages: hosts and Docker engines from the engine's log, Kubernetes
        from its pods)."""
        if not self.stages:
            from rich.spinner import Spinner

            return Spinner("dots", "applying; waiting for /health and /v1/models ...")
        return self.table()

    def table(self) -> Table:
        table = Table(box=None, show_header=True, pad_edge=False)
        for col in ("instance", "where", "stage", "waited", "latest log line"):
            table.add_column(col, no_wrap=col != "latest log line", overflow="ellipsis")
        now = time.monotonic()
        for key, r in self.stages.items():
            # the waited time ticks on between two reports (a unit's log is read every 5 s)
            waited = r.elapsed if r.stage == "healthy" else r.elapsed + now - self.seen_at[key]
            style = "green" if r.stage == "healthy" else "red" if r.stage == "failing" else ""
            table.add_row(r.unit, r.where, f"[{style}]{r.stage}[/]" if style else r.stage,
                          f"{int(waited)}s/{int(r.timeout)}s", Text(r.line))
        return table

    def planned(self, kind: str, changes: list[Change], compared: bool) -> None:
        if kind == "kubernetes":
            for c in changes:
                line = f"{KUBE_WORDS[c.action]:8} {c.unit}" if compared else f"apply {c.unit}"
                self.console.print(line)
            if compared and all(c.action == "keep" for c in changes):
                self.console.print("nothing to change")
            return
        print_changes(self.console, changes)
        if not compared:
            where = "Docker hosts" if kind == "docker" else "hosts"
            self.console.print(
                f"offline: the {where} were not contacted; without --offline, `up` compares "
                "with what runs there and keeps what is current")
        elif all(c.action == "keep" for c in changes):
            self.console.print("nothing to change: every instance is running the current spec")

    def confirm(self) -> bool:
        if not typer.confirm("apply these changes?", default=False):
            raise typer.Abort()
        return True

    def applying(self, target: Target) -> AbstractContextManager[object]:
        shown: AbstractContextManager[object] = nullcontext()
        if self.console.is_terminal:
            shown = self.showing()
        events = target.interrupts()
        if events is None:
            return shown
        return _both(shown, ctrl_c(*events))

    @contextmanager
    def showing(self) -> Iterator[None]:
        """A live table of the instances' stages, below the logged steps (terminal only)."""
        with Live(get_renderable=self.shown, console=self.console, refresh_per_second=4) as live:
            self.live = live
            try:
                yield
            finally:
                self.live = None


def stage_line(r: Stage) -> str:
    """One plain line: `[  12s/900s] serve-0 on gpu-a: loading weights | <log line>`."""
    head = f"[{int(r.elapsed):>4}s/{int(r.timeout)}s] {r.unit} on {r.where}: {r.stage}"
    return f"{head} | {r.line}" if r.line else head


@contextmanager
def _both(
    first: AbstractContextManager[object], second: AbstractContextManager[object]
) -> Iterator[None]:
    with first, second:
        yield


def print_changes(console: Console, changes: list[Change]) -> None:
    table = Table(title="plan", show_lines=False)
    for col in ("host", "unit", "role", "action", "why"):
        table.add_column(col)
    for c in changes:
        table.add_row(c.host, c.unit, c.role, f"[{STYLES[c.action]}]{c.action}[/]", c.why)
    console.print(table)


@contextmanager
def ctrl_c(interrupt: Event, hurry: Event) -> Iterator[None]:
    """While applying, Ctrl-C does not cut a remote step in half: the first sets `interrupt`
    (the run is undone after the current step), the second `hurry` (undo without waiting for
    health), a third raises KeyboardInterrupt (undo abandoned, reported as unknown)."""

    def handler(_signum: int, _frame: FrameType | None) -> None:
        if not interrupt.is_set():
            interrupt.set()
        elif not hurry.is_set():
            hurry.set()
        else:
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def report_undo(console: Console, outcome: Outcome) -> None:
    """How the run left what it had changed: restored, stopped, or not undone (and why);
    nothing when the run had changed nothing (it failed before starting anything)."""
    if outcome.stopped:
        console.print(f"stopped what this run started: {', '.join(outcome.stopped)}")
    for what in outcome.restored:
        console.print(f"restored {what}")
    for what in outcome.left:
        console.print(f"[red]NOT undone[/] {what}")


def failed_run(console: Console, exc: UpFailed, verb: str) -> PdctlError:
    """A run that failed and was undone (`up`, `scale`, `restart`): what failed and how it was
    undone, printed; the one error line to raise."""
    report_failures(console, exc.failures)
    report_undo(console, exc.outcome)
    return PdctlError(f"{verb} failed: {exc.line()}")


def report_failures(console: Console, failures: list[UnitFailure]) -> None:
    for f in failures:
        why = printable(f.why)  # as text, not markup: a "[rank0]" in it stays
        if f.unit == "-":
            console.print(Text(why, style="red"))
            continue
        console.print(Text.assemble(("FAILED", "red"), f" {f.unit} on host {f.host}: {why}"))
        if f.log.strip():
            console.print("  last lines of its log:")
            for line in f.log.rstrip().splitlines()[-20:]:
                console.print(f"  | {printable(line)}", markup=False, soft_wrap=True)
