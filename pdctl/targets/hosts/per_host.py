"""What a deployment's hosts share however pdctl reaches them: SSH (fleet.py and remote.py, the
rendered scripts) or a Docker engine's API (pdctl.targets.docker: the same containers, made by
the docker SDK). Each host's operations follow `UnitOps`, the connections `UnitFleet`; the
verbs written once over them (`PerHost`): the changes (state.diff of what runs against the
bundle), `status`, `logs`, `endpoints`; the health wait of `up` is health_wait.py's."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from ipaddress import ip_address
from typing import Any, Protocol, TypeVar

from pdctl.errors import PdctlError, UsageError
from pdctl.plan.model import Plan
from pdctl.plan.router import caches_engine_ids, router_listen
from pdctl.render.bundle import Bundle
from pdctl.spec.value import url_host
from pdctl.targets.base import StatusRow, Write
from pdctl.targets.health import Health
from pdctl.targets.outcome import NO_LOG_NOTE, NoLog
from pdctl.targets.ssh import HostLost
from pdctl.targets.state import (
    START_GRACE,
    Change,
    Desired,
    Observed,
    asked_restarts,
    desired_units,
    diff,
    fresh_router,
    not_answering,
    overdue,
    restarted,
    supervision,
    whole_groups,
)

T = TypeVar("T")
R = TypeVar("R")


class UnitOps(Protocol):
    """One host's units, as the shared verbs and the health wait ask them."""

    @property
    def name(self) -> str: ...

    def probe(
        self, port: int, model: str, path: str = "/health", unit: str | None = None,
        address: str = "127.0.0.1",
    ) -> Health: ...

    def alive(self, unit: str) -> bool: ...

    def ended(self, unit: str) -> str:
        """Why `unit` is not alive (after alive() said so)."""
        ...

    def tail(self, unit: str, lines: int = 20) -> str: ...

    def tails(self, units: list[str], lines: int = 20, missing_ok: bool = False) -> dict[str, str]:
        ...

    def follow(self, unit: str, write: Any, lines: int = 50) -> None: ...


class UnitFleet(Protocol):
    """The connections to a deployment's hosts: each host's UnitOps, the unreachable ones."""

    @property
    def ops(self) -> Mapping[str, UnitOps]: ...

    @property
    def unreachable(self) -> dict[str, str]: ...

    def connect(self, host_names: Iterable[str] | None = None, tolerate: bool = False) -> None:
        ...

    def observed(
        self, tolerate: bool = False, ports: dict[str, list[tuple[str, int]]] | None = None
    ) -> list[Observed]: ...

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]: ...

    def close(self) -> None: ...


class PerHost:
    """The verbs of a target whose units run on hosts (HostsTarget, ContainerHosts), over its
    `fleet`."""

    plan: Plan
    bundle: Bundle
    fleet: UnitFleet
    asked: frozenset[str] = frozenset()  # units `pdctl restart` names (set by `changes`)

    @property
    def unreachable(self) -> dict[str, str]:
        """Hosts that `changes`, `down`, `status` or `logs` could not reach: name -> why."""
        return self.fleet.unreachable

    def close(self) -> None:
        self.fleet.close()

    def desired(self) -> list[Desired]:
        return desired_units(self.plan, self.bundle)

    def probe_ports(self) -> dict[str, list[tuple[str, int]]]:
        """host -> (unit, port) of every unit the health probes ask (HostOps.survey)."""
        ports: dict[str, list[tuple[str, int]]] = {}
        for d in self.desired():
            if d.port is not None:
                ports.setdefault(d.host.name, []).append((d.name, d.port))
        return ports

    def changes(
        self, grace: float = START_GRACE, restart: frozenset[str] = frozenset()
    ) -> list[Change]:
        self.asked = restart  # apply plans again under the run lock: the same units
        self.fleet.connect()
        return self.planned(self.fleet.observed(), grace)

    def planned(self, seen: list[Observed], grace: float) -> list[Change]:
        """The changes from what runs (`seen`): the diff, the repairs, the restarts asked
        for (`pdctl restart`), whole groups."""
        leaders = {u.unit.name: u.unit.leader for u in self.bundle.units}
        changes = self.repairs(diff(self.desired(), seen), seen, grace)
        planned = whole_groups(asked_restarts(changes, self.asked), leaders)
        return fresh_router(planned, caches_engine_ids(self.plan))

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
