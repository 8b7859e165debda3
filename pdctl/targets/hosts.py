"""The bare-metal target: apply a hosts bundle over SSH (phases 0 and 2).

`up`: connect (one SSH connection per host, bounded parallelism), read what runs, diff against
the bundle, stop what is gone or changed, upload, start by stage (stores, engines, router),
wait for health. On a failure: report the unit and its last log lines, stop what this run
started (all of it, or with keep_going only the failed units), raise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from pdctl.errors import PdctlError
from pdctl.plan.model import Plan
from pdctl.render.bundle import Bundle
from pdctl.render.host import deploy_dir
from pdctl.targets.remote import HostOps
from pdctl.targets.ssh import Connection, SshOptions
from pdctl.targets.state import Change, Desired, Observed, desired_units, diff, host_files

T = TypeVar("T")
R = TypeVar("R")
Say = Callable[[str], None]


@dataclass
class UnitFailure:
    host: str
    unit: str
    why: str
    log: str


class UpFailed(PdctlError):
    def __init__(self, failures: list[UnitFailure], stopped: list[str]) -> None:
        self.failures = failures
        self.stopped = stopped
        first = failures[0]
        if first.unit == "-":
            super().__init__(first.why)
        else:
            last = _last(first.log)[:300]
            super().__init__(f"{first.unit} on host {first.host} failed: {first.why}"
                             + (f"; its log ends: {last}" if last else ""))


@dataclass
class StatusRow:
    host: str
    unit: str
    role: str
    pid: str
    state: str
    health: str
    model: str
    endpoint: str


@dataclass
class HostsTarget:
    plan: Plan
    bundle: Bundle
    options: SshOptions = field(default_factory=SshOptions)
    parallel: int = 8
    say: Say = lambda _msg: None
    ops: dict[str, HostOps] = field(default_factory=dict)

    # -- connections ---------------------------------------------------------------------
    def connect(self, host_names: Iterable[str] | None = None) -> None:
        hosts = [h for h in self.plan.spec.hosts if host_names is None or h.name in host_names]
        hosts = [h for h in hosts if h.name not in self.ops]

        def one(host):  # type: ignore[no-untyped-def]
            conn = Connection(host, self.options).connect()
            return HostOps(conn, deploy_dir(self.plan, host))

        for ops in self.map(one, hosts):
            self.ops[ops.name] = ops
            self.say(f"connected to {ops.name} ({ops.conn.host.address})")

    def close(self) -> None:
        for ops in self.ops.values():
            ops.conn.close()
        self.ops.clear()

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        items = list(items)
        if not items:
            return []
        with ThreadPoolExecutor(max_workers=max(1, min(self.parallel, len(items)))) as pool:
            return list(pool.map(fn, items))

    # -- reading state ---------------------------------------------------------------------
    def desired(self) -> list[Desired]:
        return desired_units(self.plan, self.bundle)

    def observed(self) -> list[Observed]:
        out: list[Observed] = []
        for rows in self.map(lambda ops: ops.observe(), list(self.ops.values())):
            out.extend(rows)
        return out

    def changes(self) -> list[Change]:
        self.connect()
        return diff(self.desired(), self.observed())

    # -- up ----------------------------------------------------------------------------------
    def up(
        self,
        changes: list[Change],
        secrets: dict[str, str],
        timeout: float = 900.0,
        keep_going: bool = False,
        poll: float = 2.0,
    ) -> list[UnitFailure]:
        """Apply `changes`; returns failures when keep_going, else raises UpFailed."""
        desired = {(d.host.name, d.name): d for d in self.desired()}
        started: list[Desired] = []
        failures: list[UnitFailure] = []

        def units(actions: tuple[str, ...], stage: int | None = None) -> list[Desired]:
            out = [desired[(c.host, c.unit)] for c in changes if c.action in actions]
            return [d for d in out if stage is None or d.stage == stage]

        try:
            touched = sorted({c.host for c in changes if c.action != "keep"})
            self.map(lambda h: self.ops[h].prepare(secrets), touched)
            for c in changes:
                if c.action in ("stop", "restart"):
                    _, text = self.ops[c.host].stop(c.unit)
                    self.say(f"{c.unit} on {c.host}: {_last(text) or 'stopped'}")
                    if c.action == "stop":
                        self.ops[c.host].remove_unit(c.unit)
            for host in touched:
                todo = [d for d in units(("start", "restart")) if d.host.name == host]
                files = host_files(self.bundle, host) + [f for d in todo for f in d.files]
                self.ops[host].upload(files, f"hosts/{host}")
            for stage in sorted({d.stage for d in desired.values()}):
                todo = units(("start", "restart"), stage)
                started.extend(todo)  # before starting: an interrupt mid-start stops them too
                results = self.map(self._start, todo)
                for d, (ok, text) in zip(todo, results, strict=True):
                    if not ok:
                        failures.append(self._failure(d, f"start script failed: {_last(text)}"))
                bad = {(f.host, f.unit) for f in failures}
                waiting = [d for d in todo + units(("keep",), stage)
                           if (d.host.name, d.name) not in bad]
                failures.extend(self.wait_healthy(waiting, timeout, poll))
                if failures and not keep_going:
                    break
        except KeyboardInterrupt:
            failures.append(UnitFailure("-", "-", "interrupted (Ctrl-C)", ""))
            stopped = self._rollback(started, failures, keep_going=False)
            raise UpFailed(failures, stopped) from None
        if failures:
            stopped = self._rollback(started, failures, keep_going)
            if not keep_going:
                raise UpFailed(failures, stopped)
        return failures

    def _start(self, d: Desired) -> tuple[bool, str]:
        self.say(f"starting {d.name} ({d.role}) on {d.host.name}")
        return self.ops[d.host.name].start(d.name)

    def _failure(self, d: Desired, why: str) -> UnitFailure:
        return UnitFailure(d.host.name, d.name, why, self.ops[d.host.name].tail(d.name))

    def _rollback(
        self, started: list[Desired], failures: list[UnitFailure], keep_going: bool
    ) -> list[str]:
        failed = {(f.host, f.unit) for f in failures}
        victims = [d for d in started if not keep_going or (d.host.name, d.name) in failed]
        for d in reversed(victims):
            self.ops[d.host.name].stop(d.name)
            self.say(f"stopped {d.name} on {d.host.name}")
        return [d.name for d in victims]

    def wait_healthy(self, units: list[Desired], timeout: float, poll: float) -> list[UnitFailure]:
        """Poll until every unit is healthy; a unit whose process died fails at once."""
        deadline = time.monotonic() + timeout
        pending = list(units)
        failures: list[UnitFailure] = []
        last: dict[str, str] = {}
        while pending:
            for d in list(pending):
                ops = self.ops[d.host.name]
                if d.port is None:
                    if ops.alive(d.name):
                        pending.remove(d)
                        self.say(f"{d.name} on {d.host.name}: running")
                    else:
                        pending.remove(d)
                        failures.append(self._failure(d, "the process exited"))
                    continue
                health = ops.probe(d.port, self.plan.served_name, d.health_path or "/health")
                if health.ok:
                    pending.remove(d)
                    self.say(f"{d.name} on {d.host.name}: healthy")
                    continue
                if last.get(d.name) != health.detail:
                    last[d.name] = health.detail
                if not ops.alive(d.name):
                    pending.remove(d)
                    why = "the process exited before it became healthy"
                    failures.append(self._failure(d, why))
            if pending and time.monotonic() > deadline:
                for d in pending:
                    why = f"not healthy after {int(timeout)} s ({last.get(d.name, 'no answer')})"
                    failures.append(self._failure(d, why))
                break
            if pending:
                time.sleep(poll)
        return failures

    # -- down / status / logs ------------------------------------------------------------
    def down(self) -> list[tuple[str, str]]:
        """Stop every unit in the deployment folder of every host, then remove the folder."""
        self.connect()
        stage = {(d.host.name, d.name): d.stage for d in self.desired()}

        def one(ops: HostOps) -> list[tuple[str, str]]:
            stopped = []
            found = ops.observe()
            # Reverse start order: the router before the engines, stores last.
            found.sort(key=lambda o: (-stage.get((o.host, o.name), 1), o.name))
            for obs in found:
                ops.stop(obs.name)
                stopped.append((ops.name, obs.name))
            ops.remove_all(ops.conn.host.data_dir)
            return stopped

        out: list[tuple[str, str]] = []
        for rows in self.map(one, list(self.ops.values())):
            out.extend(rows)
        return out

    def status(self) -> list[StatusRow]:
        self.connect()
        desired = {(d.host.name, d.name): d for d in self.desired()}
        observed = {(o.host, o.name): o for o in self.observed()}
        rows = []
        for key in sorted(set(desired) | set(observed)):
            d, o = desired.get(key), observed.get(key)
            role = d.role if d else "-"
            state = "running" if o and o.running else ("stopped" if o else "not started")
            health, models = "-", ""
            if d and d.port is not None and o and o.running:
                path = d.health_path or "/health"
                h = self.ops[key[0]].probe(d.port, self.plan.served_name, path)
                health = "healthy" if h.ok else h.detail
                models = ",".join(h.models)
            if d and o and o.hash != d.hash:
                state += " (outdated)"
            if d is None:
                state += " (not in spec)"
            endpoint = ""
            if d and d.port is not None:
                endpoint = f"http://{d.host.address}:{d.port}"
            pid = o.pid if o else "-"
            rows.append(StatusRow(key[0], key[1], role, pid, state, health, models, endpoint))
        return rows

    def units(self) -> list[tuple[str, str]]:
        self.connect()
        names = {(d.host.name, d.name) for d in self.desired()}
        names |= {(o.host, o.name) for o in self.observed()}
        return sorted(names)


def endpoints(plan: Plan, desired: list[Desired]) -> list[str]:
    """Where clients send requests: the router when there is one, else every engine."""
    routers = [d for d in desired if d.role == "router" and d.port]
    chosen = routers or [d for d in desired if d.role == "serve" and d.port]
    return [f"http://{d.host.address}:{d.port}/v1" for d in chosen]


def _last(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
