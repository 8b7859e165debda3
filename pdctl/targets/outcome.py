"""What a rollout (pdctl.targets.hosts.rollout) did: each unit's failure, how failed or undone units
were left, and the error `up` raises from it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pdctl.errors import PdctlError
from pdctl.targets.crashline import telling_line
from pdctl.targets.stages import log_lines


@dataclass
class UnitFailure:
    host: str
    unit: str
    why: str
    log: str


@dataclass
class Outcome:
    """What a rollout did: failures, and how each failed or undone unit was left."""

    failures: list[UnitFailure] = field(default_factory=list)
    interrupted: bool = False
    stopped: list[str] = field(default_factory=list)  # started by this run, stopped again
    restored: list[str] = field(default_factory=list)  # "unit (healthy)": previous version back
    left: list[str] = field(default_factory=list)  # "unit on host: why" (could not be undone)

    def summary(self) -> str:
        parts = []
        if self.restored:
            parts.append("restored " + ", ".join(self.restored))
        if self.stopped:
            parts.append("stopped what this run started: " + ", ".join(self.stopped))
        if self.left:
            parts.append("NOT undone: " + "; ".join(self.left))
        return "; ".join(parts) or "nothing had been changed"


class UpFailed(PdctlError):
    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.failures = outcome.failures
        self.stopped = outcome.stopped
        if outcome.interrupted:
            head = "interrupted (Ctrl-C)"
        else:
            first = outcome.failures[0]
            if first.unit == "-" or first.why.startswith(f"host {first.host} "):
                head = first.why
            else:
                head = f"{first.unit} on host {first.host} failed: {first.why}"
                last = telling_line(first.log)[:300]
                if last and last not in first.why:  # not a second time
                    head += f"; its log ends: {last}"
        super().__init__(f"{head}; {outcome.summary()}")


# A command-line tool's pointer to its help, printed after the line that says what went
# wrong: "Run 'docker run --help' for more information", "See 'docker run --help'.",
# "Try 'cp --help' for more information."
HINT = re.compile(r"^(\S+: )?(Run|See|Try) '[^']*--help'( for more information)?\.?$", re.I)


def last_line(text: str) -> str:
    """The last line of a command's output that says something: escape sequences and control
    characters gone, a tool's "Run '... --help' for more information" hint skipped."""
    lines = [line for line in log_lines(text) if not HINT.match(line)]
    return lines[-1] if lines else ""


WHY_NO_LOG = "not started, or removed by down"  # why a unit has no log (container)
NO_LOG_NOTE = f"(no log: {WHY_NO_LOG})\n"  # in place of one unit's log among several


class NoLog(PdctlError):
    """Units with no log on a host: never started there, or removed by `down` (exit 1)."""

    def __init__(self, units: list[str], host: str) -> None:
        self.units = units
        super().__init__(f"{', '.join(units)} on {host}: no log ({WHY_NO_LOG})")
