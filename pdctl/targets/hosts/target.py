"""The bare-metal target: apply a hosts bundle over SSH (phases 0 and 2).

`up`: connect (one SSH connection per host, bounded parallelism: fleet.py), read what runs,
diff against the bundle, then take the run lock on every host (run_lock.py: one up/down of a
deployment at a time), and roll the changes out unit by unit and undo them on a failure
(rollout.py). `down` (under the same lock) and `status` work on the hosts they can reach and
say which they could not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from pdctl.errors import PdctlError
from pdctl.plan.model import Plan
from pdctl.render.bundle import Bundle
from pdctl.render.host import bundle_dir, deploy_dir
from pdctl.targets.base import Closing, Observer, Stage, StatusRow, Stopped
from pdctl.targets.hosts.fleet import Fleet, fleet_of
from pdctl.targets.hosts.per_host import PerHost, endpoints
from pdctl.targets.hosts.rollout import Rollout
from pdctl.targets.outcome import Outcome, UnitFailure, UpFailed
from pdctl.targets.ssh import SshOptions
from pdctl.targets.state import Change, diff

__all__ = ["HostsTarget", "Outcome", "StatusRow", "UnitFailure", "UpFailed", "endpoints"]

Say = Callable[[str], None]


def acts(changes: list[Change]) -> list[tuple[str, str, str]]:
    """What the changes do (host, unit, action), without why."""
    return [(c.host, c.unit, c.action) for c in changes]


@dataclass
class HostsTarget(PerHost, Closing):
    kind: ClassVar[Literal["hosts"]] = "hosts"
    plan: Plan
    bundle: Bundle
    options: SshOptions = field(default_factory=SshOptions)
    parallel: int = 8
    say: Say = lambda _msg: None
    stage: Callable[[Stage], None] = lambda _s: None  # where each unit is (read by Rollout)
    # Set by the CLI's SIGINT handler: the first Ctrl-C (undo this run), the second (undo
    # without waiting for health).
    interrupt: threading.Event = field(default_factory=threading.Event)
    hurry: threading.Event = field(default_factory=threading.Event)
    fleet: Fleet = field(init=False)

    def __post_init__(self) -> None:
        self.fleet = fleet_of(self.plan, self.bundle, self.options, self.parallel, self.say)

    def interrupts(self) -> tuple[threading.Event, threading.Event]:
        return self.interrupt, self.hurry

    def diff(self) -> tuple[list[Change], dict[str, str]]:
        """The changes, and `host/unit` -> the unified diff of the files of each unit whose
        scripts change (hosts/diff.py)."""
        from pdctl.targets.hosts.diff import script_diffs

        changes = self.changes()
        texts = script_diffs(self.fleet.ops, self.desired(), changes)
        return changes, {f"{h}/{u}": t for (h, u), t in texts.items() if t}

    # -- apply -------------------------------------------------------------------------------
    def apply(
        self, changes: list[Change], secrets: dict[str, str], timeout: float = 900.0,
        keep_going: bool = False, poll: float = 2.0,
    ) -> Outcome:
        """Apply `changes` (see rollout.py). Raises UpFailed when something failed and the
        run was undone (or on Ctrl-C); with keep_going returns the outcome, failures and all."""
        # One up/down at a time: the changes to make must be the ones read before the lock.
        locked = self.fleet.lock()
        # Compared without the reasons: one may name a time (`after 26 s running`).
        if acts(self.planned(locked, timeout)) != acts(changes):
            raise PdctlError(
                f"what runs of {self.plan.name!r} changed since pdctl read it (another pdctl "
                "up, down or restart?); nothing was changed: run the command again"
            )
        rollout = Rollout(
            self.fleet, self.bundle, self.desired(), self.plan.served_name, self.stage, timeout,
            keep_going, poll, self.interrupt, self.hurry,
        )
        outcome = rollout.run(changes, secrets)
        if outcome.interrupted or (outcome.failures and not keep_going):
            raise UpFailed(outcome)
        return outcome

    # -- down / status / logs ------------------------------------------------------------
    def down(self, delete_volumes: bool = False, timeout: float | None = None) -> Stopped:
        """Stop every unit in the deployment folder of every reachable host under the run
        lock, then remove the folder (each stop.sh has its own timeout); the files `up
        --bundle` copied stay unless `delete_volumes` (`--delete-bundle`); see hosts/down.py."""
        from pdctl.targets.hosts.down import down

        return down(self.fleet, self.desired(), self.plan.name, delete_volumes)

    def down_plan(self, delete_volumes: bool = False) -> Stopped:
        """What `down` would stop (every unit that runs), reading only; the hosts it could not
        reach are recorded, with the spec's units on each, as `down` records them; `folders`:
        the deployment folder `down` would remove on each host reached; `bundles`: the
        bundle folder there (KiB), which `down` keeps unless `delete_volumes`."""
        from pdctl.targets.hosts.down import held, kept_command
        from pdctl.targets.hosts.remote import HostOps

        self.fleet.connect(tolerate=True)
        changes = diff(self.desired(), self.fleet.observed(tolerate=True))
        out = Stopped(unreachable=dict(sorted(self.unreachable.items())))
        out.left = {host: self.left_on(host) for host in out.unreachable}
        # What runs there now: every unit observed (`start` is a unit that does not run).
        out.removed = [
            (c.host, c.unit)
            for c in changes
            if c.action != "start" and c.host not in out.unreachable
        ]
        out.folders = {
            h.name: deploy_dir(self.plan, h)
            for h in self.plan.spec.hosts
            if h.name not in out.unreachable
        }

        def kept(ops: HostOps) -> tuple[str, str | None] | PdctlError:
            folder = bundle_dir(self.plan.name, ops.conn.host)
            try:
                return folder, held(ops.conn.run(kept_command(ops, folder)).out)
            except PdctlError as exc:  # HostLost included: lost since it was read
                return exc

        reached = [ops for ops in self.fleet.reachable() if ops.name not in out.unreachable]
        for ops, got in zip(reached, self.fleet.map(kept, reached), strict=True):
            if isinstance(got, PdctlError):
                out.unreachable[ops.name] = got.line()
                out.left[ops.name] = self.left_on(ops.name)
                out.removed = [(h, u) for h, u in out.removed if h != ops.name]
                out.folders.pop(ops.name, None)
            elif got[1] is not None:
                out.bundles[ops.name] = (got[0], got[1])
        return out

    def left_on(self, host: str) -> list[str]:
        """The spec's units on a host (what may still run where pdctl could not look)."""
        return [d.name for d in self.desired() if d.host.name == host]

    def observe(self) -> Observer:
        from pdctl.targets.hosts.observe import HostsObserver

        return HostsObserver(self.plan, self.bundle, self.fleet)
