"""`up` on bare metal: roll a change plan out unit by unit, and undo it on a failure.

Forward, before any stage: units no longer in the spec are stopped (their folders stay until
the end, so they can be started again). Then per stage (stores, engines, router): units new
to the host (or found stopped) are started together and waited for, with the stage's kept
units (a stopped unit whose scripts changed gets the new ones, its old ones kept in
`<unit>/previous/`); then each running unit whose scripts changed is replaced, one at a
time: its files are kept in `<unit>/previous/`, the running version is stopped (the new one
needs its port), the new files are uploaded and started, and pdctl waits until it is
healthy. Last, once everything is healthy, the folders of removed units are deleted.

On a failure or Ctrl-C (without keep_going) the whole run is undone, newest first: units it
started are stopped; units it replaced get their previous version back from `previous/`;
units it stopped are started again; then pdctl waits until what it restarted is healthy. A
unit that was stopped before the run stays stopped: it gets its previous scripts back, and
is not started.
With keep_going only a failed unit is undone and the rollout goes on. A host that stops
answering fails its units; what runs there cannot be stopped, and the report names it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal

from pdctl.errors import PdctlError
from pdctl.targets.base import Stage
from pdctl.targets.hosts.health_wait import HealthWait
from pdctl.targets.outcome import Outcome, UnitFailure, UpFailed, last_line
from pdctl.targets.ssh import HostLost
from pdctl.targets.state import CHANGED_STOPPED, Change, Desired, host_files

if TYPE_CHECKING:
    from collections.abc import Callable

    from pdctl.render.bundle import Bundle
    from pdctl.targets.hosts.fleet import Fleet
    from pdctl.targets.hosts.remote import HostOps

__all__ = ["Outcome", "Rollout", "UnitFailure", "UpFailed"]  # the names others import here

# started: new, or found stopped (undo: stop it); updated: found stopped, started with changed
# scripts (undo: stop it, put the previous scripts back, do not start them); replaced: running,
# replaced (undo: stop the new one, start the previous one); stopped: no longer in the spec.
DoneKind = Literal["started", "updated", "replaced", "stopped"]


@dataclass
class Done:
    unit: Desired
    kind: DoneKind
    undone: bool = False


class Rollout(HealthWait):
    """One `up` on bare metal: forward, undo; the health wait is HealthWait's
    (pdctl.targets.hosts.health_wait)."""

    fleet: Fleet

    def __init__(
        self, fleet: Fleet, bundle: Bundle, desired: list[Desired], served: str,
        stage: Callable[[Stage], None], timeout: float, keep_going: bool, poll: float,
        interrupt: threading.Event, hurry: threading.Event,
    ) -> None:
        leaders = {u.unit.name: u.unit.leader for u in bundle.units}
        super().__init__(
            fleet, leaders, served, fleet.say, stage, timeout, keep_going, poll, interrupt
        )
        self.fleet, self.bundle, self.desired, self.hurry = fleet, bundle, desired, hurry
        self.done: list[Done] = []
        self.updated: set[tuple[str, str]] = set()  # stopped units whose scripts change
        self.out = Outcome()

    # -- forward ---------------------------------------------------------------------------
    def run(self, changes: list[Change], secrets: dict[str, str]) -> Outcome:
        desired = {(d.host.name, d.name): d for d in self.desired}
        gone = {(c.host, c.unit): c for c in changes if c.action == "stop"}
        # A stopped node of a group that restarts is a `restart` already (state.whole_groups).
        self.updated = {
            (c.host, c.unit) for c in changes if c.action == "start" and c.why == CHANGED_STOPPED
        }

        def pick(action: str, stage: int) -> list[Desired]:
            units = [desired[(c.host, c.unit)] for c in changes if c.action == action]
            return [d for d in units if d.stage == stage]

        try:
            try:
                self.forward(changes, secrets, pick, gone)
            except PdctlError as exc:  # not tied to a unit: still undo what was done
                self.out.failures.append(UnitFailure("-", "-", exc.line(), ""))
            if self.interrupt.is_set():
                self.out.interrupted = True
                self.say(
                    "interrupted (Ctrl-C): undoing this run (Ctrl-C again: do not wait for health)"
                )
            if self.out.interrupted or (self.out.failures and not self.keep_going):
                self.undo(self.done)
            else:
                for c in gone.values():
                    self.remove(c)
        except KeyboardInterrupt:  # Ctrl-C a third time: stop undoing, say what is unknown
            self.out.interrupted = True
            for item in self.done:
                if not item.undone:
                    self.out.left.append(
                        f"{item.unit.name} on {item.unit.host.name}: "
                        "unknown (undo abandoned; see `pdctl status`)"
                    )
        return self.out

    def forward(
        self, changes: list[Change], secrets: dict[str, str],
        pick: Callable[[str, int], list[Desired]], gone: dict[tuple[str, str], Change],
    ) -> None:
        touched = sorted({c.host for c in changes if c.action != "keep"})
        self.each_host(touched, lambda ops: self.prepare(ops, secrets))
        for c in gone.values():
            if not self.halted():
                self.stop_removed(c)
        for stage in sorted({d.stage for d in self.desired}):
            if self.halted():
                break
            self.start_new(pick("start", stage), pick("keep", stage))
            for batch in self.restart_batches(pick("restart", stage), pick("keep", stage)):
                if self.halted():
                    break
                if len(batch) == 1:
                    self.replace(batch[0])
                else:
                    self.replace_group(batch)

    def halted(self) -> bool:
        return self.interrupt.is_set() or (bool(self.out.failures) and not self.keep_going)

    def prepare(self, ops: HostOps, secrets: dict[str, str]) -> None:
        ops.prepare(secrets)
        ops.upload(host_files(self.bundle, ops.name), f"hosts/{ops.name}")

    def each_host(self, hosts: list[str], fn: Callable[..., None]) -> None:
        def one(host: str) -> None:
            self.guard(host, "-", lambda: fn(self.fleet.ops[host]))

        self.fleet.map(one, hosts)

    def stop_removed(self, c: Change) -> None:
        ops = self.fleet.ops[c.host]
        unit = Desired(ops.conn.host, c.unit, c.role, "", None)
        self.done.append(Done(unit, "stopped"))
        if self.guard(c.host, c.unit, lambda: self.stop(unit)):
            self.say(f"{c.unit} on {c.host}: stopped (no longer in the spec)")

    def remove(self, c: Change) -> None:
        if self.guard(c.host, c.unit, lambda: self.fleet.ops[c.host].remove_unit(c.unit)):
            self.say(f"removed {c.unit} on {c.host}")

    def start_new(self, new: list[Desired], kept: list[Desired]) -> None:
        hosts = sorted({d.host.name for d in new})
        unsaved: set[tuple[str, str]] = set()  # updated units whose old scripts were not kept

        def upload(host: str) -> None:
            ops = self.fleet.ops[host]
            mine = [d for d in new if d.host.name == host]
            for d in mine:
                if (host, d.name) in self.updated:
                    self.say(
                        f"{d.name} on {host} is not running and its scripts changed: the new "
                        f"version is started (the old one is kept in {d.name}/previous)"
                    )
                    if not self.guard(host, d.name, partial(ops.save_previous, d.name)):
                        unsaved.add((host, d.name))
            files = [f for d in mine if (host, d.name) not in unsaved for f in d.files]
            if not self.guard(host, "-", lambda: ops.upload(files, f"hosts/{host}")):
                unuploaded.add(host)

        unuploaded: set[str] = set()  # hosts whose scripts could not be written: start none
        self.fleet.map(upload, hosts)
        for d in new:
            if d.host.name in self.lost:
                why = f"not started: host {d.host.name} was lost"
                self.out.failures.append(UnitFailure(d.host.name, d.name, why, ""))
        todo = [
            d
            for d in new
            if d.host.name not in self.lost | unuploaded and (d.host.name, d.name) not in unsaved
        ]
        kept = [d for d in kept if d.host.name not in self.lost]
        # before starting: Ctrl-C undoes them
        self.done.extend(Done(d, self.kind_of_start(d)) for d in todo)
        oks = self.fleet.map(lambda d: self.guard(d.host.name, d.name, lambda: self.start(d)), todo)
        started = [d for d, ok in zip(todo, oks, strict=True) if ok]
        failures, _ = self.wait_healthy(started + kept, self.interrupt)
        self.out.failures.extend(failures)
        if self.keep_going and failures:
            # A multi-node group fails as a whole: every node of it is undone.
            failed = {self.group_of(f.unit) for f in failures}
            self.undo([i for i in self.done if self.group_of(i.unit.name) in failed])

    def kind_of_start(self, d: Desired) -> DoneKind:
        return "updated" if (d.host.name, d.name) in self.updated else "started"

    def restart_batches(self, restart: list[Desired], kept: list[Desired]) -> list[list[Desired]]:
        """Units to replace, one batch each; a multi-node group is one batch with all of its
        nodes (a node cannot rejoin a running group: the group restarts as a whole)."""
        batches: dict[str, list[Desired]] = {}
        for d in restart:
            batches.setdefault(self.group_of(d.name), []).append(d)
        for d in kept:
            if self.group_of(d.name) in batches:
                batches[self.group_of(d.name)].append(d)
        return [sorted(b, key=lambda d: self.group_of(d.name) != d.name) for b in batches.values()]

    def replace_group(self, batch: list[Desired]) -> None:
        """Replace every node of a group: keep each running version in `previous/`, stop them
        all, then start the new versions together and wait for the group."""
        names = ", ".join(d.name for d in batch)
        self.say(f"replacing the group {names} together (a node cannot rejoin a running group)")
        items: list[Done] = []

        def step(fn: Callable[[Desired], object], d: Desired) -> bool:
            return self.guard(d.host.name, d.name, partial(fn, d))

        def keep(d: Desired) -> None:
            self.fleet.ops[d.host.name].save_previous(d.name)

        def swap(d: Desired) -> None:
            self.fleet.ops[d.host.name].upload(list(d.files), f"hosts/{d.host.name}")
            self.start(d)

        for d in batch:
            if not step(keep, d):
                break
            items.append(Done(d, "replaced"))
        self.done.extend(items)
        if len(items) == len(batch):
            stopped = [step(self.stop, d) for d in batch]
            if all(stopped):
                started = [step(swap, d) for d in batch]
                if all(started):
                    failures, _ = self.wait_healthy(batch, self.interrupt)
                    self.out.failures.extend(failures)
        failed = {f.unit for f in self.out.failures}
        if self.keep_going and (failed & {d.name for d in batch} or len(items) < len(batch)):
            self.undo(items)

    def replace(self, d: Desired) -> None:
        ops = self.fleet.ops[d.host.name]
        self.say(
            f"replacing {d.name} on {d.host.name} (the running version is kept in "
            f"{d.name}/previous)"
        )
        if not self.guard(d.host.name, d.name, lambda: ops.save_previous(d.name)):
            return
        item = Done(d, "replaced")
        self.done.append(item)

        def swap() -> None:
            self.stop(d)
            self.say(f"{d.name} on {d.host.name}: stopped the running version")
            ops.upload(list(d.files), f"hosts/{d.host.name}")
            self.start(d)

        if self.guard(d.host.name, d.name, swap):
            failures, _ = self.wait_healthy([d], self.interrupt)
            self.out.failures.extend(failures)
        if self.keep_going and any(f.unit == d.name for f in self.out.failures):
            self.undo([item])

    # -- one unit ----------------------------------------------------------------------------
    def start(self, d: Desired) -> None:
        self.say(f"starting {d.name} ({d.role}) on {d.host.name}")
        ok, text = self.fleet.ops[d.host.name].start(d.name)
        if not ok:
            raise PdctlError(f"start script failed: {last_line(text)}")

    def stop(self, d: Desired) -> None:
        ok, text = self.fleet.ops[d.host.name].stop(d.name)
        if not ok:
            raise PdctlError(f"cannot stop it: {last_line(text)}")

    def guard(self, host: str, unit: str, fn: Callable[[], object]) -> bool:
        """Run fn; a failure is recorded against the unit (a lost host against all of it)."""
        if host in self.lost:
            self.out.failures.append(UnitFailure(host, unit, f"host {host} was lost", ""))
            return False
        try:
            fn()
            return True
        except HostLost as exc:
            self.lost.add(host)
            self.out.failures.append(UnitFailure(host, unit, exc.line(), ""))
        except PdctlError as exc:
            self.out.failures.append(UnitFailure(host, unit, exc.line(), self.tail(host, unit)))
        return False

    # -- undo ----------------------------------------------------------------------------------
    def undo(self, items: list[Done]) -> None:
        """Stop what `items` started (newest first), then bring back what they replaced or
        stopped, and wait for that to be healthy (unless Ctrl-C is pressed again)."""
        items = [i for i in items if not i.undone]
        back: list[Done] = []
        for item in reversed(items):
            d, host = item.unit, item.unit.host.name
            item.undone = True
            if host in self.lost:
                still = "it may still be running" if item.kind != "stopped" else "not started"
                self.out.left.append(f"{d.name} on {host}: host lost, {still}")
                continue
            if item.kind == "stopped":
                back.append(item)
                continue
            if not self.undo_step(d, partial(self.stop, d)):
                continue
            if item.kind == "started":
                self.out.stopped.insert(0, d.name)
                self.say(f"stopped {d.name} on {host}")
            elif item.kind == "updated":
                self.say(f"stopped {d.name} on {host}")
                self.put_back(item)
            else:
                back.append(item)
        restarted = [i for i in reversed(back) if self.bring_back(i)]
        failures, unfinished = self.wait_healthy([i.unit for i in restarted], self.hurry)
        why = {f.unit: f.why for f in failures}
        for item in restarted:
            name, state = item.unit.name, "healthy" if item.unit.port else "running"
            if name in why:
                state = f"not healthy: {why[name]}"
            elif item.unit in unfinished:
                state = "not waited for: Ctrl-C"
            if item.kind == "replaced":
                self.out.restored.append(f"the previous version of {name} ({state})")
            else:
                self.out.restored.append(f"{name}, which this run had stopped ({state})")

    def undo_step(self, d: Desired, fn: Callable[[], object], left: str = "") -> bool:
        """Run one step of an undo; a failure is said in `out.left` (`left` before the error,
        unless the host was lost)."""
        host = d.host.name
        try:
            fn()
            return True
        except HostLost as exc:
            self.lost.add(host)
            self.out.left.append(f"{d.name} on {host}: {exc.line()}")
        except PdctlError as exc:
            self.out.left.append(f"{d.name} on {host}: {left}{exc.line()}")
        return False

    def put_back(self, item: Done) -> None:
        """The previous scripts of a unit that was stopped before this run, back in place and
        not started (it stays as it was: stopped)."""
        d = item.unit
        restore = partial(self.fleet.ops[d.host.name].restore_previous, d.name)
        if self.undo_step(d, restore, "stopped, "):
            self.out.restored.append(
                f"the previous version of {d.name} (not started: it was stopped before this run)"
            )

    def bring_back(self, item: Done) -> bool:
        d = item.unit

        def again() -> None:
            if item.kind == "replaced":
                self.fleet.ops[d.host.name].restore_previous(d.name)
            self.start(d)

        return self.undo_step(d, again, "not running: ")
