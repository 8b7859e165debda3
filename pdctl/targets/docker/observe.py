"""A running deployment on Docker engines read through the docker SDK (`--docker-url`): the
containers found by their pdctl labels, each engine's port on its host's address from where
pdctl runs (as the health probe), the GPU probe run inside one running engine container per
host (it has the GPUs, python3 and vLLM's nvidia-ml-py; the Docker host need not)."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from pdctl.targets.base import Endpoint, Reply, Telemetry
from pdctl.targets.health import http_request
from pdctl.targets.hosts.observe import host_endpoints


class DockerObserver:
    workers: dict[str, tuple[str, str]] = {}  # noqa: RUF012 (phase 0: no router)

    def __init__(self, target: Any) -> None:  # ContainerHosts, which imports this module
        self.target = target
        self.unreachable: dict[str, str] = target.unreachable
        target.fleet.connect()
        at = {h.name: h.address for h in target.plan.spec.hosts}  # from where pdctl runs
        found = host_endpoints(target.plan, target.bundle)
        self.endpoints = [replace(e, address=at[e.where]) for e in found]
        self.containers: dict[str, Any] = {}  # unit -> container, as last looked up
        self._find()

    def _find(self) -> None:
        self.containers = {unit: c for (_host, unit), c in self.target.fleet.found().items()}

    def close(self) -> None:
        self.target.close()

    def request(self, e: Endpoint, path: str, method: str = "GET", body: bytes = b"",
                headers: dict[str, str] | None = None, timeout: float = 10.0) -> Reply:
        self._find()
        cont = self.containers.get(e.name)
        if cont is None or cont.status != "running":
            state = "missing" if cont is None else cont.status
            return Reply(0, f"container {e.name}: {state}", time.monotonic())
        try:
            sock = socket.create_connection((e.address, e.port), timeout=5)
            status, text = http_request(sock, method, path, body, e.address, timeout, headers)
        except OSError as exc:
            why = f"{type(exc).__name__} on {e.address}:{e.port}"
            return Reply(0, f"{path}: no answer ({why})", time.monotonic())
        return Reply(status, text, time.monotonic())

    def logs(self, lines: int = 2000) -> dict[str, str]:
        return {}

    def gpus(self, command: str, window_s: float) -> list[Telemetry]:
        def one(host: str) -> Telemetry:
            mine = [self.containers[e.name] for e in self.endpoints
                    if e.where == host and e.name in self.containers]
            running = [c for c in mine if c.status == "running"]
            if not running:
                why = "GPU telemetry: no running engine container to read it in"
                return Telemetry(host, failed=f"{host}: {why}")
            cont = running[0]
            try:
                rc, (out, err) = cont.exec_run(["sh", "-c", command], demux=True)
            except Exception as exc:  # the container went away, the engine refused exec
                why = f"GPU telemetry in container {cont.name}: {exc}"
                return Telemetry(host, failed=f"{host}: {why}")
            text = (out or b"").decode("utf-8", "replace")
            tail = (err or out or b"").decode("utf-8", "replace").strip()[-200:]
            exited = f"GPU probe in container {cont.name} exited {rc}: {tail}" if rc else ""
            return Telemetry(host, text, exited=exited)

        hosts = sorted({e.where for e in self.endpoints})
        with ThreadPoolExecutor(max(1, min(8, len(hosts)))) as pool:
            return list(pool.map(one, hosts))
