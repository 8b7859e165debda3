"""A deployment whose units are all containers on Docker hosts, through the docker SDK
(`pdctl up --docker-url HOST=URL`): the bundle's containers (render/container.py), the same
ones start.sh runs over SSH.

The Docker API is a transport of the hosts' verbs: one Engine (engine.py) per host, the
hosts' per-host operations (pdctl.targets.hosts.per_host.UnitOps), so that the changes,
`status`, `logs` and `up`'s health wait are the SSH hosts' own (per_host.py,
health_wait.py). What is the engine's alone: pulling images, creating and removing the
containers (undone as a whole: the containers this run created are removed), and the URLs
transport.py checks before anything connects. Engines are probed on the unit's port on its
host's address from where pdctl runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

from pdctl.errors import PdctlError, UsageError
from pdctl.plan.model import Plan
from pdctl.render.bundle import Bundle
from pdctl.render.container import UNIT, Container
from pdctl.spec.lora import fetched
from pdctl.targets.base import Closing, Observer, Stage, Stopped
from pdctl.targets.docker.engine import Engine, client_for, docker_home, observed
from pdctl.targets.docker.transport import DockerAccess, check
from pdctl.targets.hosts.health_wait import HealthWait
from pdctl.targets.hosts.per_host import PerHost, R, T
from pdctl.targets.outcome import Outcome, UpFailed
from pdctl.targets.state import Change, Desired, Observed


@dataclass
class Engines(Closing):
    """The Docker engines of a deployment's hosts, one Engine per host: what the hosts' shared
    verbs read (per_host.UnitFleet), as Fleet holds the SSH connections. `where`: unit -> the
    host the spec plans it on. An engine that cannot be reached raises."""

    plan: Plan
    urls: dict[str, str]
    access: DockerAccess
    where: dict[str, str]
    say: Callable[[str], None] = lambda _m: None
    stage: Callable[[Stage], None] = lambda _s: None
    ops: dict[str, Engine] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)

    def connect(self, host_names: Iterable[str] | None = None, tolerate: bool = False) -> None:
        hosts = {h.name: h for h in self.plan.spec.hosts}
        for host, url in self.urls.items():
            if host not in self.ops:
                client = client_for(url, self.access, host, hosts.get(host))
                self.ops[host] = Engine(
                    client, self.plan.name, say=self.say, home=docker_home(client, url),
                    where=host, stage=self.stage, address=hosts[host].address,
                )

    def close(self) -> None:
        for engine in self.ops.values():
            engine.client.close()
        self.ops.clear()

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        return [fn(item) for item in items]

    def found(self) -> dict[tuple[str, str], Any]:
        """This deployment's containers by (host, unit). A container seen through two spec
        hosts that share one engine is listed once: under the host the spec plans it on (the
        other host must not plan to stop it as "no longer in the spec")."""
        seen: dict[str, tuple[Any, list[str]]] = {}
        for host, engine in self.ops.items():
            for c in engine.containers():
                seen.setdefault(c.id, (c, []))[1].append(host)
        out = {}
        for c, hosts in seen.values():
            name = c.labels.get(UNIT, c.name)
            host = self.where[name] if self.where.get(name) in hosts else hosts[0]
            out[(host, name)] = c
        return out

    def observed(
        self, tolerate: bool = False, ports: dict[str, list[tuple[str, int]]] | None = None
    ) -> list[Observed]:
        return [observed(host, c) for (host, _unit), c in self.found().items()]


@dataclass
class ContainerHosts(PerHost, Closing):
    kind: ClassVar[Literal["docker"]] = "docker"
    plan: Plan
    bundle: Bundle
    urls: dict[str, str]
    say: Callable[[str], None] = lambda _m: None
    stage: Callable[[Stage], None] = lambda _s: None  # where each engine is while up waits
    access: DockerAccess = field(default_factory=DockerAccess)
    fleet: Engines = field(init=False)

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
        where = {u.unit.name: u.unit.host.name for u in self.bundle.units}
        self.fleet = Engines(self.plan, self.urls, self.access, where, self.say, self.stage)

    def desired(self) -> list[Desired]:
        """The bundle's units, each with its container's hash (the `pdctl.io/hash` label)."""
        hashes = {u.unit.name: u.hash for u in self.bundle.units}
        return [replace(d, hash=hashes[d.name]) for d in super().desired()]

    def containers(self, host: str) -> list[Container]:
        """The rendered containers of `host`."""
        units = self.bundle.units
        return [u.container for u in units if u.container and u.unit.host.name == host]

    def interrupts(self) -> None:
        return None  # Ctrl-C raises KeyboardInterrupt: apply removes what it created

    def apply(
        self, changes: list[Change], secrets: dict[str, str], timeout: float = 900.0,
        keep_going: bool = False,
    ) -> Outcome:
        """Pull the images the hosts lack, apply `changes` host by host, then wait until every
        engine of every host is healthy (the hosts' health wait, one deadline); on a failure
        (or Ctrl-C) remove the containers this run created and raise (keep_going: no). Pulls
        come first: a bad image fails before any container is replaced."""
        engines = self.fleet.ops
        leaders = {u.unit.name: u.unit.leader for u in self.bundle.units}
        wait = HealthWait(self.fleet, leaders, self.plan.served_name, self.say, self.stage, timeout)
        try:
            for host, engine in engines.items():
                mine = [c for c in changes if c.host == host]
                engine.pull_missing(self.containers(host), mine, timeout)
            for host, engine in engines.items():
                mine = [c for c in changes if c.host == host]
                engine.apply(self.containers(host), mine, secrets)
            units = [d for d in self.desired() if d.host.name in engines]
            failures, _ = wait.wait_healthy(units, wait.interrupt)
        except (PdctlError, KeyboardInterrupt):
            self.rollback()
            raise
        if failures:
            raise UpFailed(Outcome(failures, stopped=self.rollback()))
        return Outcome()

    def rollback(self) -> list[str]:
        return [name for engine in self.fleet.ops.values() for name in engine.rollback()]

    def diff(self) -> tuple[list[Change], dict[str, str]]:
        """The changes; a container has no text to compare."""
        return self.changes(), {}

    def down_plan(self, delete_volumes: bool = False) -> Stopped:
        """The containers `down` would remove (every one of this deployment that exists)."""
        return Stopped(removed=[(c.host, c.unit) for c in self.changes() if c.action != "start"])

    def down(self, delete_volumes: bool = False, timeout: float | None = None) -> Stopped:
        """Remove this deployment's containers (the HF cache on the host is never removed)."""
        self.fleet.connect()
        engines = self.fleet.ops.items()
        return Stopped(removed=[(host, name) for host, e in engines for name in e.down()])

    def observe(self) -> Observer:
        from pdctl.targets.docker.observe import DockerObserver

        return DockerObserver(self)
