"""The real vllm-router 0.1.17 accepts the command line pdctl renders, in every PD mode.

Needs an installed router: `PDCTL_TEST_VLLM_ROUTER=/path/to/bin/vllm-router`, or the e2e
environment (`PDCTL_TEST_VLLM_DIR`, prepared by tests/e2e/prepare_vllm_cpu.sh, has
`router/bin/vllm-router`). Stand-in engines answer /health, /metrics and Mooncake's /query."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from pdctl.plan import make_plan
from pdctl.plan.router import router_service
from pdctl.spec import load_text
from tests.helpers import answers, wait_until, written
from tests.render.test_cpu_nixl import free_ports

pytestmark = pytest.mark.e2e

ENGINE = textwrap.dedent(
    """\
    import http.server, json, sys
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"0": {"engine_id": "e0"}}).encode() if self.path == "/query" else b""
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
    """
)


def router_binary() -> Path:
    explicit = os.environ.get("PDCTL_TEST_VLLM_ROUTER")
    if explicit:
        return Path(explicit)
    root = os.environ.get("PDCTL_TEST_VLLM_DIR")
    if root and (Path(root) / "router/bin/vllm-router").exists():
        return Path(root) / "router/bin/vllm-router"
    pytest.skip("no vllm-router: set PDCTL_TEST_VLLM_ROUTER or PDCTL_TEST_VLLM_DIR")


@pytest.mark.parametrize("connector", ["nixl", "mooncake", "p2p-nccl"])
def test_router_starts_with_rendered_flags(connector: str, tmp_path: Path) -> None:
    binary = router_binary()
    pre, dec, boot, port, metrics, disc = free_ports(6)
    doc = {
        "name": "rt", "phase": 2, "model": {"name": "m"},
        "engine": {"version": "0.23.0" if connector == "p2p-nccl" else "0.33.0"},
        "hosts": [{"name": "lo", "address": "127.0.0.1", "gpus": [0, 1]}],
        "prefill": {"replicas": 1, "port": pre}, "decode": {"replicas": 1, "port": dec},
        "disaggregation": {"connector": connector, "bootstrapPort": boot},
        "router": {"port": port, "metricsPort": metrics, "discoveryPort": disc},
    }
    spec, _ = load_text(yaml.safe_dump(doc), "spec.yaml")
    command = list(router_service(make_plan(spec)).command)
    if "--" in command:  # Mooncake: under pdctl's router watch (tests/render/test_router_watch.py)
        command = command[command.index("--") + 1:]
    assert command[0] == "vllm-router", command
    command[0] = str(binary)
    engine = written(tmp_path / "engine.py", ENGINE)
    fakes = [subprocess.Popen([sys.executable, str(engine), str(p)]) for p in (pre, dec, boot)]
    log = (tmp_path / "router.log").open("w")
    router = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/liveness"), "the router",
                   lambda: router.poll() is None, detail=(tmp_path / "router.log").read_text)
    finally:
        router.send_signal(signal.SIGTERM)
        router.wait(30)
        for fake in fakes:
            fake.kill()
            fake.wait()
