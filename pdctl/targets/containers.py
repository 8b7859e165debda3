"""Phase 0 on Docker hosts through the docker SDK (`pdctl up --docker-url HOST=URL`).

One DockerTarget per host (the local socket, ssh://user@host, or tcp:// with TLS: see
docker_transport, which checks every URL before anything connects); health is probed on the
host's published port from where pdctl runs.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from pdctl.errors import PdctlError, UsageError
from pdctl.plan.model import Plan
from pdctl.render.host import Unit, engine_unit, model_dir
from pdctl.targets.docker import DockerTarget, client_for, docker_home
from pdctl.targets.docker_transport import DockerAccess, check
from pdctl.targets.health import API_KEY_ENV, probe
from pdctl.targets.state import Change


def parse_urls(values: list[str]) -> dict[str, str]:
    out = {}
    for value in values:
        host, sep, url = value.partition("=")
        if not sep or not host or not url:
            raise UsageError(f"--docker-url takes HOST=URL (got {value!r})")
        out[host] = url
    return out


@dataclass
class ContainerHosts:
    plan: Plan
    urls: dict[str, str]
    network: str = "bridge"
    say: Callable[[str], None] = lambda _m: None
    access: DockerAccess = field(default_factory=DockerAccess)
    targets: dict[str, DockerTarget] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.plan.phase != 0:
            raise UsageError("--docker-url works for phase 0 specs (engines only)")
        for inst in self.plan.instances:
            assert inst.host is not None
            if inst.host.runtime != "docker":
                raise UsageError(f"--docker-url: host {inst.host.name} has runtime "
                                 f"{inst.host.runtime}, not docker")
            if inst.host.name not in self.urls:
                raise UsageError(f"--docker-url: no URL for host {inst.host.name}")
        names = {h.name for h in self.plan.spec.hosts}
        for host, url in self.urls.items():
            if host not in names:
                raise UsageError(f"--docker-url {host}={url}: the spec has no host {host}")
            check(host, url, self.access)

    def units(self) -> dict[str, list[Unit]]:
        out: dict[str, list[Unit]] = {}
        for inst in self.plan.instances:
            unit = engine_unit(self.plan, inst)
            out.setdefault(unit.host.name, []).append(unit)
        return out

    def connect(self) -> None:
        for host, url in self.urls.items():
            if host not in self.targets:
                spec_host = next((h for h in self.plan.spec.hosts if h.name == host), None)
                client = client_for(url, self.access, host, spec_host)
                self.targets[host] = DockerTarget(
                    client, self.plan.name, network=self.network, say=self.say,
                    home=docker_home(client, url), model_dir=model_dir(self.plan),
                )

    def changes(self) -> list[Change]:
        self.connect()
        out: list[Change] = []
        units = self.units()
        for host, tgt in self.targets.items():
            for change in tgt.changes(units.get(host, [])):
                out.append(Change(host, change.unit, change.role, change.action, change.why))
        return out

    def up(self, changes: list[Change], secrets: dict[str, str], timeout: float) -> None:
        units = self.units()
        try:
            for host, tgt in self.targets.items():
                mine = [c for c in changes if c.host == host]
                tgt.apply(units.get(host, []), mine, secrets)
            for host, tgt in self.targets.items():
                for unit in units.get(host, []):
                    address = unit.host.address

                    def healthy(_name: str, port: int = unit.port, addr: str = address) -> bool:
                        opener = lambda: socket.create_connection((addr, port), timeout=5)  # noqa: E731
                        key = secrets.get(API_KEY_ENV)
                        return probe(opener, self.plan.served_name, api_key=key).ok

                    tgt.wait_running([unit.name], timeout, healthy)
                    self.say(f"{unit.name} on {host}: healthy")
        except (PdctlError, KeyboardInterrupt):
            for tgt in self.targets.values():
                tgt.rollback()
            raise

    def down(self) -> list[tuple[str, str]]:
        self.connect()
        return [(host, name) for host, tgt in self.targets.items() for name in tgt.down()]

    def status(self) -> list[dict[str, str]]:
        self.connect()
        return [{"host": host, **row} for host, tgt in self.targets.items()
                for row in tgt.status()]

    def endpoints(self) -> list[str]:
        return [f"http://{u.host.address}:{u.port}/v1"
                for units in self.units().values() for u in units]
