"""`up` waiting until units are healthy (the Rollout's poll rounds; the Docker target's too, an
Engine answering for a host's units).

A round asks the hosts in parallel (a host's units one after another, so that one
observation of the host answers all of them), then decides unit by unit, in order: healthy,
still starting (its stage and latest log line reported), failed (process or container
exited, or restarted by Docker: UnitOps.ended says which; port held by another process, a
node of its multi-node group failed, host lost) or, at the deadline, not healthy in time.
The pause between rounds starts at FIRST_PAUSE and doubles up to the rollout's poll interval.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pdctl.errors import PdctlError
from pdctl.targets.base import Stage
from pdctl.targets.health import FIRST_PAUSE, LOOK, Health
from pdctl.targets.outcome import UnitFailure
from pdctl.targets.ssh import HostLost
from pdctl.targets.stages import latest_line, stage_of
from pdctl.targets.state import Desired

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pdctl.targets.hosts.per_host import UnitFleet

ALIVE_EVERY = 1.0  # seconds: a unit's process is looked for at most this often while it starts
# lines of a failed unit's log read for its failure line (pdctl/targets/crashline.py): vLLM's
# first ERROR line comes before the engine core's traceback and the API server's
FAILED_TAIL = 300


@dataclass
class Look:
    """What one poll round found about one unit (HealthWait.look_all)."""

    health: Health | None = None  # None: the unit has no port (or the probe was not reached)
    alive: bool = False
    log: str | None = None  # its log's last lines, when it was time to read them again
    at: float = 0.0  # when alive() was answered (time.monotonic())
    error: PdctlError | None = None  # HostLost: the host is gone; else this unit's question


class HealthWait:
    """`up`'s health wait over a fleet's hosts (SSH: Rollout, pdctl.targets.hosts.rollout,
    which undoes a run; Docker engines: pdctl.targets.docker.target). `leaders`: unit -> its
    group's leader (None: its own group); `lost`: the hosts lost meanwhile."""

    def __init__(
        self, fleet: UnitFleet, leaders: Mapping[str, str | None], served: str,
        say: Callable[[str], None], stage: Callable[[Stage], None], timeout: float,
        keep_going: bool = False, poll: float = 2.0, interrupt: threading.Event | None = None,
    ) -> None:
        self.fleet, self.leaders, self.served, self.say, self.stage = (
            fleet, leaders, served, say, stage
        )
        self.timeout, self.keep_going, self.poll = timeout, keep_going, poll
        self.interrupt = interrupt or threading.Event()
        self.lost: set[str] = set()

    def group_of(self, name: str) -> str:
        """The group a unit belongs to: its leader's name (a headless node of a multi-node
        group, plan/group.py), else its own."""
        return self.leaders.get(name) or name

    def tail(self, host: str, unit: str) -> str:
        if unit == "-" or host in self.lost:
            return ""
        try:
            return self.fleet.ops[host].tail(unit, FAILED_TAIL)
        except HostLost:
            self.lost.add(host)
            return ""

    def wait_healthy(
        self, units: list[Desired], stop: threading.Event
    ) -> tuple[list[UnitFailure], list[Desired]]:
        """Poll until every unit is healthy; a unit whose process died fails at once. Returns
        the failures and the units still pending when `stop` was set (or, in the forward
        rollout without keep_going, when one failed: the run is undone anyway)."""
        forward = stop is self.interrupt and not self.keep_going
        begun = time.monotonic()
        deadline = begun + self.timeout
        looked: dict[str, float] = {}  # unit -> when its log was last read for its stage
        checked: dict[str, float] = {}  # unit -> when its process was last seen running
        pending = list(units)
        failures: list[UnitFailure] = []
        last: dict[str, str] = {}
        pause = min(FIRST_PAUSE, self.poll)  # doubled after each round, up to self.poll

        def fail(d: Desired, why: str, log: str = "") -> None:
            pending.remove(d)
            failures.append(UnitFailure(d.host.name, d.name, why, log))

        while pending:
            found = self.look_all(pending, looked, checked)
            for d in list(pending):
                if d not in pending:
                    continue
                lost = [
                    f.unit for f in failures if f.unit != d.name and self.group_of(f.unit) == d.name
                ]
                if lost:  # a multi-node group's leader: a failed node fails the group
                    fail(d, f"a node of its group failed ({lost[0]})")
                    continue
                look = found[(d.host.name, d.name)]
                if isinstance(look.error, HostLost):
                    self.lost.add(d.host.name)
                    for other in [p for p in pending if p.host.name == d.host.name]:
                        fail(other, look.error.line())
                    continue
                if look.health is not None:
                    health = look.health
                    if health.ok:
                        pending.remove(d)
                        self.say(f"{d.name} on {d.host.name}: healthy")
                        self.report(d, "healthy", "", time.monotonic() - begun)
                        continue
                    last[d.name] = health.detail
                    if health.foreign:  # another process holds the port: waiting won't help
                        fail(d, health.detail, self.tail(d.host.name, d.name))
                        continue
                leader = self.group_of(d.name)
                if leader != d.name and leader in {f.unit for f in failures}:
                    fail(d, f"its group's leader {leader} failed")  # this node goes with it
                    continue
                if look.error is not None:  # the host answers, but not this question
                    fail(d, look.error.line())
                    continue
                if look.alive:
                    # A headless node counts as up once its leader is healthy; until
                    # then it is watched, so one that dies fails the group at once.
                    waiting = leader != d.name and any(p.name == leader for p in pending)
                    if d.port is None and not waiting:
                        pending.remove(d)
                        self.say(f"{d.name} on {d.host.name}: running")
                    elif look.log is not None:
                        looked[d.name] = look.at
                        elapsed = look.at - begun
                        self.report(d, stage_of(look.log), latest_line(look.log), elapsed)
                    continue
                why = self.fleet.ops[d.host.name].ended(d.name)
                why += " before it became healthy" if d.port else ""
                fail(d, why, self.tail(d.host.name, d.name))
            if pending and time.monotonic() > deadline:
                for d in pending:
                    seen = last.get(d.name, "no answer")
                    why = f"not healthy after {int(self.timeout)} s ({seen})"
                    failures.append(
                        UnitFailure(d.host.name, d.name, why, self.tail(d.host.name, d.name))
                    )
                return failures, []
            if pending and (stop.wait(pause) or (forward and failures)):
                return failures, pending
            pause = min(pause * 2, self.poll)
        return failures, []

    def look_all(
        self, pending: list[Desired], looked: dict[str, float], checked: dict[str, float]
    ) -> dict[tuple[str, str], Look]:
        """One poll round's questions to the hosts: the hosts in parallel (the thread pool of
        the target), the units of one host one after another (so that one observation of
        the host answers alive() for all of them). What the answers mean is decided by the
        caller, unit by unit in order. A unit seen running less than ALIVE_EVERY seconds
        ago is not looked for again (the short first pauses would otherwise cost the host an
        observation per round while its engines start)."""
        served = self.served
        hosts: dict[str, list[Desired]] = {}
        for d in pending:
            hosts.setdefault(d.host.name, []).append(d)

        def one(d: Desired) -> Look:
            ops = self.fleet.ops[d.host.name]
            look = Look()
            if d.port is not None:
                look.health = ops.probe(
                    d.port, served, d.ready_path or "/health", unit=d.name, address=d.address
                )
                if look.health.ok or look.health.foreign:
                    return look
            look.at = time.monotonic()
            if look.at - checked.get(d.name, -ALIVE_EVERY) < ALIVE_EVERY:
                look.alive = True  # seen running a moment ago
                return look
            look.alive = ops.alive(d.name)
            look.at = time.monotonic()
            if look.alive:
                checked[d.name] = look.at
            if look.alive and look.at - looked.get(d.name, -LOOK) >= LOOK:
                look.log = ops.tail(d.name, 50)
            return look

        def host(units: list[Desired]) -> list[Look]:
            out: list[Look] = []
            for d in units:
                if out and isinstance(out[-1].error, HostLost):  # the rest: lost as well
                    out.append(Look(error=out[-1].error))
                    continue
                try:
                    out.append(one(d))
                except PdctlError as exc:  # HostLost too: the caller tells them apart
                    out.append(Look(error=exc))
            return out

        seen: dict[tuple[str, str], Look] = {}
        for units, looks in zip(hosts.values(), self.fleet.map(host, hosts.values()), strict=True):
            seen.update(((d.host.name, d.name), look) for d, look in zip(units, looks, strict=True))
        return seen

    def report(self, d: Desired, stage: str, line: str, elapsed: float) -> None:
        self.stage(Stage(d.name, d.host.name, stage, line, elapsed, self.timeout))
