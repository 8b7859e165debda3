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
from dataclasses import dataclass, field, replace
from ipaddress import ip_address
from typing import ClassVar, Literal

from pdctl.errors import PdctlError, UsageError
from pdctl.plan.model import Plan
from pdctl.plan.router import router_listen
from pdctl.render.bundle import Bundle
from pdctl.render.host import deploy_dir
from pdctl.spec.value import url_host
from pdctl.targets.base import Closing, Observer, Stage, StatusRow, Stopped, Write
from pdctl.targets.hosts.fleet import Fleet, fleet_of
from pdctl.targets.hosts.rollout import Rollout
from pdctl.targets.outcome import NO_LOG_NOTE, NoLog, Outcome, UnitFailure, UpFailed
from pdctl.targets.ssh import HostLost, SshOptions
from pdctl.targets.state import (
    START_GRACE,
    Change,
    Desired,
    Observed,
    desired_units,
    diff,
    not_answering,
    overdue,
    restarted,
    supervision,
    whole_groups,
)

__all__ = ["HostsTarget", "Outcome", "StatusRow", "UnitFailure", "UpFailed", "endpoints"]

Say = Callable[[str], None]


def acts(changes: list[Change]) -> list[tuple[str, str, str]]:
    """What the changes do (host, unit, action), without why."""
    return [(c.host, c.unit, c.action) for c in changes]


@dataclass
class HostsTarget(Closing):
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

    @property
    def unreachable(self) -> dict[str, str]:
        """Hosts that `changes`, `down`, `status` or `logs` could not reach: name -> why."""
        return self.fleet.unreachable

    def close(self) -> None:
        self.fleet.close()

    def interrupts(self) -> tuple[threading.Event, threading.Event]:
        return self.interrupt, self.hurry

    # -- reading state ---------------------------------------------------------------------
    def desired(self) -> list[Desired]:
        return desired_units(self.plan, self.bundle)

    def probe_ports(self) -> dict[str, list[tuple[str, int]]]:
        """host -> (unit, port) of every unit the health probes ask (HostOps.survey)."""
        ports: dict[str, list[tuple[str, int]]] = {}
        for d in self.desired():
            if d.port is not None:
                ports.setdefault(d.host.name, []).append((d.name, d.port))
        return ports

    def changes(self, grace: float = START_GRACE) -> list[Change]:
        self.fleet.connect()
        return self.planned(self.fleet.observed(), grace)

    def planned(self, seen: list[Observed], grace: float) -> list[Change]:
        """The changes from what runs (`seen`): the diff, the repairs, whole groups."""
        leaders = {u.unit.name: u.unit.leader for u in self.bundle.units}
        return whole_groups(self.repairs(diff(self.desired(), seen), seen, grace), leaders)

    def repairs(self, changes: list[Change], seen: list[Observed], grace: float) -> list[Change]:
        """A kept unit whose server has run past `grace` seconds and does not answer its
        health probe is restarted (never kept and waited on)."""
        observed = {(o.host, o.name): o for o in seen}
        desired = {(d.host.name, d.name): d for d in self.desired()}
        out = []
        for c in changes:
            o, d = observed.get((c.host, c.unit)), desired.get((c.host, c.unit))
            if c.action == "keep" and d and d.port is not None and o and overdue(o, grace):
                h = self.fleet.ops[c.host].probe(
                    d.port, self.plan.served_name, d.health_path or "/health", unit=d.name,
                    address=d.address,
                )
                if not h.ok:
                    c = not_answering(c, h.detail, o)
            out.append(c)
        return out

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
                "up or down?); nothing was changed: run `pdctl up` again"
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
        lock, then remove the folder (hosts keep no volumes; each stop.sh has its own
        timeout); see hosts/down.py."""
        from pdctl.targets.hosts.down import down

        return down(self.fleet, self.desired(), self.plan.name)

    def down_plan(self, delete_volumes: bool = False) -> Stopped:
        """What `down` would stop (every unit that runs), reading only; the hosts it could not
        reach are recorded, with the spec's units on each, as `down` records them; `folders`:
        the deployment folder `down` would remove on each host reached."""
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
        return out

    def left_on(self, host: str) -> list[str]:
        """The spec's units on a host (what may still run where pdctl could not look)."""
        return [d.name for d in self.desired() if d.host.name == host]

    def status(self) -> list[StatusRow]:
        """One row per unit; units of an unreachable host read `unreachable`."""
        self.fleet.connect(tolerate=True)
        desired = {(d.host.name, d.name): d for d in self.desired()}
        seen = self.fleet.observed(tolerate=True, ports=self.probe_ports())
        observed = {(o.host, o.name): o for o in seen}
        rows = []
        for key in sorted(set(desired) | set(observed)):
            d, o = desired.get(key), observed.get(key)
            role = d.role if d else "-"
            endpoint = ""
            if d and d.port is not None:
                endpoint = f"http://{d.host.address}:{d.port}"
            if key[0] in self.unreachable:
                rows.append(
                    StatusRow(key[0], key[1], role, "-", "unknown", "unreachable", "", endpoint)
                )
                continue
            state = "running" if o and o.running else ("stopped" if o else "not started")
            if o and o.state == "gone":
                state = "not answering"
            health, models = "-", ""
            if d and d.port is not None and o and o.running:
                path = d.health_path or "/health"
                try:
                    h = self.fleet.ops[key[0]].probe(
                        d.port, self.plan.served_name, path, unit=key[1], address=d.address
                    )
                    health = "healthy" if h.ok else h.detail
                    models = ",".join(h.models)
                except HostLost as exc:  # lost while probing: say so, keep the other rows
                    self.unreachable[key[0]] = exc.line()
                    health = "unreachable"
            if health not in ("healthy", "-", "unreachable") and overdue(o):
                state = "not answering"  # past its start grace: broken, not starting
            if o is not None:
                state += supervision(o) + restarted(o.restarts)
            if d and o and o.hash != d.hash:
                state += " (outdated)"
            if d is None:
                state += " (not in spec)"
            pid = o.pid if o else "-"
            how = o.supervisor if o else ""
            row = StatusRow(key[0], key[1], role, pid, state, health, models, endpoint)
            rows.append(replace(row, supervisor=how))
        return rows

    def units(self) -> list[tuple[str, str]]:
        self.fleet.connect()
        names = {(d.host.name, d.name) for d in self.desired()}
        names |= {(o.host, o.name) for o in self.fleet.observed()}
        return sorted(names)

    def logs(self, unit: str | None, follow: bool, lines: int, write: Write) -> None:
        """The last `lines` of UNIT's log (of every unit without one), or follow one unit. A
        host that cannot be reached does not hide the others' logs: its units read
        `(host unreachable)` and the run ends with its error (exit 1)."""
        self.fleet.connect(tolerate=True)
        units = self.units()
        chosen = [u for u in units if unit is None or u[1] == unit]
        if not chosen:
            known = ", ".join(u for _, u in units) or "none"
            raise UsageError(f"no unit {unit!r} in {self.plan.name!r} (units: {known})")
        if follow and len(chosen) > 1:
            raise UsageError("-f follows one unit: name it (see `pdctl status`)")
        lost = [h for h in dict.fromkeys(h for h, _ in chosen) if h in self.unreachable]
        if lost and len(chosen) == 1:
            raise PdctlError(self.unreachable[lost[0]])
        if follow:
            host, name = chosen[0]
            try:
                self.fleet.ops[host].follow(name, write, lines)
            except KeyboardInterrupt:  # Ctrl-C ends following
                pass
            return
        text: dict[tuple[str, str], str] = {}
        absent: list[NoLog] = []  # units without a log, per host
        for host in sorted({h for h, _ in chosen} - set(lost)):  # one exec per host
            names = [n for h, n in chosen if h == host]
            try:
                found = self.fleet.ops[host].tails(names, lines)
            except NoLog as none:  # read the others; say which have none
                absent.append(none)
                rest = [n for n in names if n not in none.units]
                found = self.fleet.ops[host].tails(rest, lines) if rest else {}
            text.update(((host, n), t) for n, t in found.items())
        if absent and not text and not lost:  # not one log to show: the one line says why
            raise absent[0] if len(absent) == 1 else PdctlError("; ".join(map(str, absent)))
        for host, name in chosen:
            if len(chosen) > 1:
                write(f"==> {name} on {host} <==\n")
            if host in lost:
                write("(host unreachable)\n")
                continue
            write(text.get((host, name), NO_LOG_NOTE))
        if lost:
            raise PdctlError("; ".join(self.unreachable[h] for h in lost))

    def observe(self) -> Observer:
        from pdctl.targets.hosts.observe import HostsObserver

        return HostsObserver(self.plan, self.bundle, self.fleet)

    def endpoints(self) -> list[str]:
        return endpoints(self.plan, self.desired())


def endpoints(plan: Plan, desired: list[Desired]) -> list[str]:
    """Where clients send requests: the router when there is one, else every engine."""
    routers = [d for d in desired if d.role == "router" and d.port]
    chosen = routers or [d for d in desired if d.role == "serve" and d.port]
    return [_url(plan, d) for d in chosen]


def _url(plan: Plan, d: Desired) -> str:
    """The unit's API as a client reaches it; a router bound to loopback on a remote host is
    reached through an SSH tunnel (vllm-router checks no client: router.listen)."""
    if d.role != "router":
        return f"http://{url_host(d.host.address)}:{d.port}/v1"
    listen = ip_address(router_listen(plan))
    if listen.is_unspecified or _is_loopback(d.host.address) == listen.is_loopback:
        where = d.host.address if listen.is_unspecified or listen.is_loopback else str(listen)
        return f"http://{url_host(where)}:{d.port}/v1"
    if listen.is_loopback:
        user = f"{d.host.user}@" if d.host.user else ""
        return (
            f"http://{url_host(str(listen))}:{d.port}/v1 on {d.host.name} (router.listen is "
            f"loopback: ssh -L {d.port}:{url_host(str(listen))}:{d.port} "
            f"{user}{d.host.address})"
        )
    return f"http://{url_host(str(listen))}:{d.port}/v1"


def _is_loopback(address: str) -> bool:
    try:
        return ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"
