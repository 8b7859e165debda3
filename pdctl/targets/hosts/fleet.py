"""The SSH connections to a deployment's hosts: one HostOps (remote.py) per host reached,
opened in parallel (bounded), and the hosts that could not be reached (name -> why).

What the hosts target's helpers take (rollout.py, down.py, diff.py) instead of the target, and
what `pdctl top` reads a hosts deployment through."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from pdctl.errors import PdctlError, UsageError
from pdctl.plan.model import Plan
from pdctl.render.bundle import Bundle
from pdctl.render.host import deploy_dir
from pdctl.render.host_scripts import HostScripts
from pdctl.spec.model import Host
from pdctl.targets.base import Closing
from pdctl.targets.hosts.remote import HostOps
from pdctl.targets.ssh import Connection, HostLost, SshOptions
from pdctl.targets.state import Observed

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Fleet(Closing):
    """`hosts` with the deployment folder of each (`folders`: host name -> folder), and the
    scripts of the bundle pdctl runs on them."""

    hosts: list[Host]
    folders: dict[str, str]
    scripts: HostScripts
    options: SshOptions = field(default_factory=SshOptions)
    parallel: int = 8
    say: Callable[[str], None] = lambda _msg: None
    ops: dict[str, HostOps] = field(default_factory=dict)
    # Hosts that `connect(tolerate=True)`, `observed`, `lock` or a helper could not reach.
    unreachable: dict[str, str] = field(default_factory=dict)

    def connect(self, host_names: Iterable[str] | None = None, tolerate: bool = False) -> None:
        """Connect to the hosts (all of them unless named). A host that cannot be reached
        raises (the first one), or with `tolerate` is recorded in `unreachable`."""
        hosts = [h for h in self.hosts if host_names is None or h.name in host_names]
        hosts = [h for h in hosts if h.name not in self.ops and h.name not in self.unreachable]

        def one(host: Host) -> HostOps | tuple[str, PdctlError]:
            try:
                conn = Connection(host, self.options).connect()
                return HostOps(conn, self.folders[host.name], self.scripts)
            except PdctlError as exc:
                return (host.name, exc)

        errors: list[PdctlError] = []
        for res in self.map(one, hosts):
            if isinstance(res, tuple):
                if isinstance(res[1], UsageError):  # a bad option (--identity), not the host
                    raise res[1]
                self.unreachable[res[0]] = res[1].line()
                errors.append(res[1])
                continue
            self.ops[res.name] = res
            self.say(f"connected to {res.name} ({res.conn.host.address})")
        if errors and not tolerate:
            raise errors[0]

    def close(self) -> None:
        for ops in self.ops.values():
            ops.release()
            ops.conn.close()
        self.ops.clear()

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        items = list(items)
        if not items:
            return []
        with ThreadPoolExecutor(max_workers=max(1, min(self.parallel, len(items)))) as pool:
            return list(pool.map(fn, items))

    def reachable(self) -> list[HostOps]:
        return [ops for name, ops in self.ops.items() if name not in self.unreachable]

    def observed(
        self, tolerate: bool = False, ports: dict[str, list[tuple[str, int]]] | None = None
    ) -> list[Observed]:
        """What runs on every connected host; with `tolerate` a host lost meanwhile is
        recorded in `unreachable` instead of raising. With `ports` (host -> (unit, port)), the
        same exec also reads what the health probes of those units will need
        (HostOps.survey)."""

        def one(ops: HostOps) -> list[Observed]:
            try:
                if ports is not None:
                    return ops.survey(ports.get(ops.name, []))
                return ops.observe()
            except HostLost as exc:
                if not tolerate:
                    raise
                self.unreachable[ops.name] = exc.line()
                return []

        out: list[Observed] = []
        for rows in self.map(one, self.reachable()):
            out.extend(rows)
        return out

    def lock(self, tolerate: bool = False) -> list[Observed]:
        """Take the deployment's run lock on every reachable host (run_lock.py; held until
        close()) and read what runs there under it. Another `up`/`down` holding it on a host
        refuses the run in one line (PdctlError), before anything changes; the locks taken
        meanwhile are released. With `tolerate` a host lost meanwhile is recorded in
        `unreachable` instead."""

        def one(ops: HostOps) -> list[Observed] | PdctlError:
            try:
                return ops.lock()
            except HostLost as exc:
                self.unreachable[ops.name] = exc.line()
                return [] if tolerate else exc
            except PdctlError as exc:
                return exc

        found: list[Observed] = []
        refused: list[PdctlError] = []
        for res in self.map(one, self.reachable()):
            if isinstance(res, PdctlError):
                refused.append(res)
            else:
                found.extend(res)
        if refused:
            for ops in self.ops.values():
                ops.release()
            raise refused[0]
        return found


def fleet_of(
    plan: Plan, bundle: Bundle, options: SshOptions, parallel: int = 8,
    say: Callable[[str], None] | None = None,
) -> Fleet:
    """The SSH connections to `plan`'s hosts (not connected yet), with `bundle`'s scripts."""
    if bundle.scripts is None:
        raise PdctlError(f"{plan.name}: a {bundle.kind} bundle runs nothing on SSH hosts")
    folders = {h.name: deploy_dir(plan, h) for h in plan.spec.hosts}
    hosts = list(plan.spec.hosts)
    return Fleet(hosts, folders, bundle.scripts, options, parallel, say or (lambda _m: None))
