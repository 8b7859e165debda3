"""`pdctl top` on phase 0 Docker hosts driven through the docker SDK (`--docker-url HOST=URL`,
as `up` used): the containers found by their pdctl labels (targets.docker), each engine's
/metrics on the host's published port from where pdctl runs (as up's health probe), the GPUs
by running nvml_probe.py inside one running engine container per host (the container has the
GPUs, python3 and vLLM's nvidia-ml-py; the Docker host need not have them)."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pdctl.top.gpu import GpuLoad, parse_probe, probe_command
from pdctl.top.metrics import Snapshot, parse
from pdctl.top.source import Endpoint, gpu_roles, with_roles


@dataclass
class DockerSource:
    plan: Any
    bundle: Any
    connect: Any  # targets.base.Connect with docker_urls
    endpoints: list[Endpoint] = field(default_factory=list)
    workers: dict[str, tuple[str, str]] = field(default_factory=dict)  # no router in phase 0
    hosts: Any = None
    containers: dict[str, Any] = field(default_factory=dict)  # unit -> container

    def open(self) -> DockerSource:
        from pdctl.targets import open_target

        # The Docker target (pdctl.targets.docker): its units by host and its engines.
        self.hosts = open_target(self.plan, self.bundle, self.connect)
        self.hosts.connect()
        insts = {i.name: i for i in self.plan.instances}
        out = []
        for host, units in self.hosts.units().items():
            for u in units:
                inst = insts.get(u.name)
                gpus = tuple((host, g) for g in inst.gpus) if inst is not None else ()
                seqs = inst.max_num_seqs if inst is not None else None
                out.append(Endpoint(u.name, u.role, host, u.port, u.host.address, seqs, gpus))
        self.endpoints = sorted(out, key=lambda e: (e.role, e.name))
        self._find()
        return self

    def _find(self) -> None:
        self.containers = {}
        for tgt in self.hosts.targets.values():
            for cont in tgt.containers():
                self.containers[cont.labels.get("pdctl.io/unit", cont.name)] = cont

    def close(self) -> None:
        if self.hosts is not None:
            self.hosts.close()

    @property
    def unreachable(self) -> dict[str, str]:
        return dict(self.hosts.unreachable) if self.hosts is not None else {}

    def scrape(self) -> dict[str, Snapshot]:
        from pdctl.targets.health import http_get

        self._find()

        def one(e: Endpoint) -> tuple[str, Snapshot]:
            cont = self.containers.get(e.name)
            if cont is None or cont.status != "running":
                state = "missing" if cont is None else cont.status
                return e.name, Snapshot(time.monotonic(), (), f"container {e.name}: {state}")
            try:
                sock = socket.create_connection((e.address, e.port), timeout=5)
                status, body = http_get(sock, "/metrics", e.address)
            except OSError as exc:
                why = f"{type(exc).__name__} on {e.address}:{e.port}"
                return e.name, Snapshot(time.monotonic(), (), f"/metrics: no answer ({why})")
            at = time.monotonic()
            if status != 200:
                return e.name, Snapshot(at, (), f"/metrics answered {status}")
            return e.name, parse(body, at)

        with ThreadPoolExecutor(max(1, min(8, len(self.endpoints)))) as pool:
            return dict(pool.map(one, self.endpoints))

    def gpus(self, window_s: float) -> tuple[list[GpuLoad], list[str]]:
        """Every host's GPUs over `window_s` seconds, read inside one of its engine containers."""
        roles = gpu_roles(self.plan)

        def one(host: str) -> tuple[list[GpuLoad], list[str]]:
            mine = [
                self.containers[e.name]
                for e in self.endpoints
                if e.where == host and e.name in self.containers
            ]
            running = [c for c in mine if c.status == "running"]
            if not running:
                return [], [f"{host}: GPU telemetry: no running engine container to read it in"]
            cont = running[0]
            try:
                rc, (out, err) = cont.exec_run(["sh", "-c", probe_command(window_s)], demux=True)
            except Exception as exc:  # the container went away, the engine refused exec
                return [], [f"{host}: GPU telemetry in container {cont.name}: {exc}"]
            text = (out or b"").decode("utf-8", "replace")
            gpus, errors = parse_probe(host, text)
            if rc != 0 and not gpus:
                tail = (err or out or b"").decode("utf-8", "replace").strip()[-200:]
                errors = [f"GPU probe in container {cont.name} exited {rc}: {tail}"]
            out_gpus = [with_roles(g, roles.get((g.host, g.index), ())) for g in gpus]
            return out_gpus, [e if e.startswith(host) else f"{host}: {e}" for e in errors]

        start = time.monotonic()
        hosts = sorted({e.where for e in self.endpoints})
        gpus: list[GpuLoad] = []
        missing: list[str] = []
        with ThreadPoolExecutor(max(1, min(8, len(hosts)))) as pool:
            for g, m in pool.map(one, hosts):
                gpus += g
                missing += m
        time.sleep(max(0.0, window_s - (time.monotonic() - start)))
        return gpus, missing
