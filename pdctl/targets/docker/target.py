"""A deployment whose units are all containers on Docker hosts, through the docker SDK
(`pdctl up --docker-url HOST=URL`): the bundle's containers (render/container.py), the same
ones start.sh runs over SSH.

One Engine per host (the local socket, ssh://user@host, or tcp:// with TLS: see
transport.py, which checks every URL before anything connects); health is probed on the
unit's port on its host from where pdctl runs.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pdctl.errors import PdctlError, UsageError
from pdctl.plan.model import Plan, Unit
from pdctl.render.bundle import Bundle
from pdctl.render.container import Container
from pdctl.spec.lora import fetched
from pdctl.targets.base import Closing, Observer, Stage, StatusRow, Stopped, Write
from pdctl.targets.docker.engine import HASH, Engine, client_for, docker_home, env_value
from pdctl.targets.docker.transport import DockerAccess, check
from pdctl.targets.docker.wait import wait_healthy
from pdctl.targets.health import API_KEY_ENV, Health, probe
from pdctl.targets.outcome import NO_LOG_NOTE, WHY_NO_LOG, NoLog, Outcome
from pdctl.targets.state import START_GRACE, Change, restarted


@dataclass
class ContainerHosts(Closing):
    kind: ClassVar[Literal["docker"]] = "docker"
    plan: Plan
    bundle: Bundle
    urls: dict[str, str]
    say: Callable[[str], None] = lambda _m: None
    stage: Callable[[Stage], None] = lambda _s: None  # where each engine is while up waits
    access: DockerAccess = field(default_factory=DockerAccess)
    targets: dict[str, Engine] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)  # an engine that fails raises

    def __post_init__(self) -> None:
        for rendered in self.bundle.units:
            unit, on = rendered.unit, rendered.unit.host
            if on.runtime != "docker":
                raise UsageError(
                    f"--docker-url: host {on.name} has runtime {on.runtime}, not docker"
                )
            if on.name not in self.urls:
                raise UsageError(f"--docker-url: no URL for host {on.name}")
            if rendered.container is None:
                raise UsageError(
                    f"--docker-url: {unit.name} ({unit.role}) on host {on.name} is a "
                    "process, not a container, and the docker SDK starts containers only "
                    "(leave out --docker-url: the rendered scripts start every unit over SSH)"
                )
        pinned = fetched(self.plan.spec.model.lora)
        if pinned:
            raise UsageError(
                f"--docker-url: adapter {pinned[0].name} is fetched at its revision by start.sh "
                "on the host, which the docker SDK does not run (leave out --docker-url, or "
                "give the adapter as a path on the host)"
            )
        for inst in self.plan.instances:
            if inst.workers:
                raise UsageError(
                    f"--docker-url: {inst.name} spans {1 + len(inst.workers)} hosts; the SDK "
                    "path runs single-node instances (leave out --docker-url: the rendered "
                    "scripts start a group's nodes over SSH)"
                )
        names = {h.name for h in self.plan.spec.hosts}
        for host, url in self.urls.items():
            if host not in names:
                raise UsageError(f"--docker-url {host}={url}: the spec has no host {host}")
            check(host, url, self.access)

    def units(self) -> dict[str, list[Unit]]:
        """The bundle's units by host (every one a container: __post_init__)."""
        out: dict[str, list[Unit]] = {}
        for rendered in self.bundle.units:
            out.setdefault(rendered.unit.host.name, []).append(rendered.unit)
        return out

    def containers(self, host: str) -> list[Container]:
        """The rendered containers of `host`."""
        units = self.bundle.units
        return [u.container for u in units if u.container and u.unit.host.name == host]

    def connect(self) -> None:
        for host, url in self.urls.items():
            if host not in self.targets:
                spec_host = next((h for h in self.plan.spec.hosts if h.name == host), None)
                client = client_for(url, self.access, host, spec_host)
                self.targets[host] = Engine(
                    client, self.plan.name, say=self.say, home=docker_home(client, url), where=host,
                    stage=self.stage,
                )

    def changes(self, grace: float = START_GRACE) -> list[Change]:
        self.connect()
        out: list[Change] = []
        # A container seen through two spec hosts sharing one engine is one host's (found):
        # the other host must not plan to stop it as "no longer in the spec".
        mine = self.found()
        for host, tgt in self.targets.items():
            for change in tgt.changes(self.containers(host)):
                if change.action == "stop" and (host, change.unit) not in mine:
                    continue
                out.append(Change(host, change.unit, change.role, change.action, change.why))
        return out

    def close(self) -> None:
        for tgt in self.targets.values():
            tgt.client.close()
        self.targets.clear()

    def interrupts(self) -> None:
        return None  # Ctrl-C raises KeyboardInterrupt: apply removes what it created

    def apply(
        self, changes: list[Change], secrets: dict[str, str], timeout: float = 900.0,
        keep_going: bool = False,
    ) -> Outcome:
        """Pull the images the hosts lack, apply `changes` host by host, then wait until every
        engine of every host is healthy, `timeout` seconds from the start of the wait; on a
        failure (or Ctrl-C) remove the containers this run created and raise (keep_going:
        no). Pulls come first: a bad image fails before any container is replaced."""
        units = self.units()
        key = secrets.get(API_KEY_ENV)
        where = {u.name: u for host_units in units.values() for u in host_units}

        def healthy(_host: str, name: str) -> bool:
            return self.probe(where[name], key).ok

        try:
            for host, tgt in self.targets.items():
                mine = [c for c in changes if c.host == host]
                tgt.pull_missing(self.containers(host), mine, timeout)
            for host, tgt in self.targets.items():
                mine = [c for c in changes if c.host == host]
                tgt.apply(self.containers(host), mine, secrets)
            names = [(host, u.name) for host in self.targets for u in units.get(host, [])]
            wait_healthy(self.targets, names, timeout, healthy, self.say, self.stage)
        except (PdctlError, KeyboardInterrupt):
            for tgt in self.targets.values():
                tgt.rollback()
            raise
        return Outcome()

    def diff(self) -> tuple[list[Change], dict[str, str]]:
        """The changes; a container has no text to compare."""
        return self.changes(), {}

    def down_plan(self, delete_volumes: bool = False) -> Stopped:
        """The containers `down` would remove (every one of this deployment that exists)."""
        return Stopped(removed=[(c.host, c.unit) for c in self.changes() if c.action != "start"])

    def down(self, delete_volumes: bool = False, timeout: float | None = None) -> Stopped:
        """Remove this deployment's containers (the HF cache on the host is never removed)."""
        self.connect()
        return Stopped(
            removed=[(host, name) for host, tgt in self.targets.items() for name in tgt.down()]
        )

    def found(self) -> dict[tuple[str, str], Any]:
        """This deployment's containers by (host, unit). A container seen through two spec
        hosts that share one engine is listed once: under the host the spec plans it on."""
        where = {u.name: host for host, units in self.units().items() for u in units}
        seen: dict[str, tuple[Any, list[str]]] = {}
        for host, tgt in self.targets.items():
            for c in tgt.containers():
                seen.setdefault(c.id, (c, []))[1].append(host)
        out = {}
        for c, hosts in seen.values():
            name = c.labels.get("pdctl.io/unit", c.name)
            host = where[name] if where.get(name) in hosts else hosts[0]
            out[(host, name)] = c
        return out

    def probe(self, unit: Unit, api_key: str | None) -> Health:
        """`unit`'s health as `up` waits for it and `status` shows it: its port on its host's
        address, from where pdctl runs; the API key goes in a request header only."""
        addr, port = unit.host.address, unit.port
        opener = lambda: socket.create_connection((addr, port), timeout=5)  # noqa: E731
        path = unit.health_path or "/health"
        return probe(opener, self.plan.served_name, path, api_key=api_key)

    def status(self) -> list[StatusRow]:
        """One row per unit the spec plans (`not started` without a container) and per
        container of this deployment the spec does not plan (`(not in spec)`). Each running
        engine is probed as `up` probes it, with the API key the container runs with."""
        self.connect()
        planned = {(host, u.name): u for host, units in self.units().items() for u in units}
        hashes = {u.unit.name: u.hash for u in self.bundle.units}
        found = self.found()
        keys = sorted(set(planned) | set(found))
        asks = [k for k in keys if k in planned and k in found and found[k].status == "running"]
        asks = [k for k in asks if planned[k].health_path is not None]

        def ask(key: tuple[str, str]) -> Health:
            return self.probe(planned[key], env_value(found[key], API_KEY_ENV))

        with ThreadPoolExecutor(max_workers=max(1, min(8, len(asks)))) as pool:
            health = dict(zip(asks, pool.map(ask, asks), strict=True))
        rows = []
        for key in keys:
            unit, c = planned.get(key), found.get(key)
            endpoint = f"http://{unit.host.address}:{unit.port}" if unit else ""
            role = unit.role if unit else found[key].labels.get("pdctl.io/role", "-")
            state, pid = ("not started", "-") if c is None else (c.status, c.short_id)
            if c is not None:
                state += restarted(int(c.attrs.get("RestartCount") or 0))
            if unit is not None and c is not None and c.labels.get(HASH) != hashes[unit.name]:
                state += " (outdated)"
            if unit is None:
                state += " (not in spec)"
            h = health.get(key)
            shown = "-" if h is None else ("healthy" if h.ok else h.detail)
            models = ",".join(h.models) if h is not None else ""
            rows.append(StatusRow(key[0], key[1], role, pid, state, shown, models, endpoint))
        return rows

    def logs(self, unit: str | None, follow: bool, lines: int, write: Write) -> None:
        """UNIT's log (every unit's last lines without one), as on SSH hosts: a unit the spec
        plans without a container has no log (exit 1); only a name the spec does not plan and
        no container has is a usage error."""
        import docker

        self.connect()
        found = self.found()
        planned = [(host, u.name) for host, units in self.units().items() for u in units]
        names = sorted(set(planned) | set(found))
        if unit is not None and all(n != unit for _, n in names):
            known = ", ".join(n for _, n in planned) or "none"
            raise UsageError(f"no unit {unit!r} in {self.plan.name!r} (units: {known})")
        if unit is None and not found:
            raise PdctlError(
                f"no instance of {self.plan.name!r} has a container on "
                f"{', '.join(sorted(self.targets))} ({WHY_NO_LOG})"
            )
        chosen = [(h, n) for h, n in names if unit is None or n == unit]
        if follow and len(chosen) > 1:
            raise UsageError("-f follows one unit: name it (see `pdctl status`)")
        for host, name in chosen:
            if len(chosen) > 1:
                write(f"==> {name} on {host} <==\n")
            c = found.get((host, name))
            try:
                if c is not None and follow:
                    self.targets[host].follow(c.name, write, lines)
                elif c is not None:
                    write(self.targets[host].tail(c.name, lines))
            except docker.errors.NotFound:  # removed meanwhile
                c = None
            if c is None and len(chosen) == 1:  # never started, or removed by down
                raise NoLog([name], host)
            if c is None:
                write(NO_LOG_NOTE)

    def observe(self) -> Observer:
        from pdctl.targets.docker.observe import DockerObserver

        return DockerObserver(self)

    def endpoints(self) -> list[str]:
        return [
            f"http://{u.host.address}:{u.port}/v1" for units in self.units().values() for u in units
        ]
