"""`up` waits until a P/D router routes, not only until it is alive (issue 36). The real
vllm-router 0.1.17 (PDCTL_TEST_VLLM_DIR/router) in front of two stand-in engines: after the
decode was down long enough for the router to drop it, and is back, the router's /liveness
answers at once, but it routes (and /readiness answers 200) only after its next health check.
On the H100 a kept router answered 503 to every request right after `up` had repaired an
engine; `up`'s wait now asks a P/D router's /readiness (state.Desired.ready_path)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pdctl.spec.model import Host
from pdctl.targets.health import Health, http_request, probe
from pdctl.targets.hosts.health_wait import HealthWait
from tests.cli.test_status_router import router_venv
from tests.helpers import wait_until
from tests.render.test_cpu_nixl import free_ports

INTERVAL = 6  # the router's --health-check-interval-secs
HOST = Host(name="lo", address="127.0.0.1")


class Engine:
    """A stand-in engine: /health (503 while `sick`), /v1/models, /metrics."""

    def __init__(self, port: int) -> None:
        self.sick = False
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                code, body = 200, b""
                if self.path == "/health" and outer.sick:
                    code = 503
                elif self.path == "/v1/models":
                    body = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class Ops:
    """One host's units as HealthWait asks them: the probe over a loopback socket."""

    name = HOST.name

    def probe(self, port: int, model: str, path: str = "/health", unit: str | None = None,
              address: str = "127.0.0.1") -> Health:
        return probe(lambda: socket.create_connection((address, port), timeout=5), model, path)

    def alive(self, unit: str) -> bool:
        return True

    def ended(self, unit: str) -> str:
        return ""

    def tail(self, unit: str, lines: int = 20) -> str:
        return ""


class Fleet:
    ops = {HOST.name: Ops()}
    unreachable: dict[str, str] = {}

    def map(self, fn: Any, items: Any) -> list:
        return [fn(i) for i in items]


def readiness(port: int) -> int:
    """The router's /readiness status; 0 while nothing listens."""
    try:
        return http_request(socket.create_connection(("127.0.0.1", port), timeout=5), "GET",
                            "/readiness")[0]
    except OSError:
        return 0


@pytest.fixture
def router(tmp_path: Path) -> Iterator[tuple[int, Engine]]:
    binary = router_venv() / "bin" / "vllm-router"
    pre, dec, port, metrics = free_ports(4)
    engines = [Engine(pre), Engine(dec)]
    log = (tmp_path / "router.log").open("w")
    proc = subprocess.Popen(
        [str(binary), "--host", "127.0.0.1", "--port", str(port), "--vllm-pd-disaggregation",
         "--prefill", f"http://127.0.0.1:{pre}", "--decode", f"http://127.0.0.1:{dec}",
         "--kv-connector", "nixl", "--policy", "round_robin",
         "--health-check-interval-secs", str(INTERVAL), "--health-failure-threshold", "2",
         "--health-success-threshold", "1", "--prometheus-host", "127.0.0.1",
         "--prometheus-port", str(metrics)],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: readiness(port) == 200, "the router", lambda: proc.poll() is None,
                   detail=(tmp_path / "router.log").read_text, timeout=90, step=0.5)
        yield port, engines[1]
    finally:
        proc.terminate()
        proc.wait(30)
        for e in engines:
            e.server.shutdown()


def test_up_waits_for_a_kept_pd_router_to_route_again(router: tuple[int, Engine]) -> None:
    from pdctl.targets.state import Desired

    port, decode = router
    decode.sick = True
    wait_until(lambda: readiness(port) == 503, "the router dropping the decode",
               timeout=6 * INTERVAL, step=0.5)
    wait = HealthWait(Fleet(), {}, "m", lambda line: None, lambda stage: None,  # type: ignore[arg-type]
                      timeout=6 * INTERVAL, poll=0.5)
    # what `up` waited on before: the router is alive while it routes nothing
    alive_only = Desired(HOST, "r-router", "router", "", port)
    assert alive_only.ready_path == "/liveness"  # a plain-mode router, or p2p-nccl's
    failures, _ = wait.wait_healthy([alive_only], threading.Event())
    assert not failures and readiness(port) == 503
    decode.sick = False  # the decode is back (as `up` leaves a repaired engine)
    routed = Desired(HOST, "r-router", "router", "", port, readiness=True)
    assert routed.ready_path == "/readiness"
    begun = time.monotonic()
    failures, _ = wait.wait_healthy([routed], threading.Event())
    assert not failures, failures
    assert readiness(port) == 200, "up said ready before the router routed"
    assert time.monotonic() - begun <= INTERVAL + 5
