"""preflight checks the router's Prometheus port like every other port (issue 36): with
`router.metricsPort` taken on the router's host, vllm-router panics in its Prometheus
listener some 30 s into `up`; preflight must fail first and name the field. Over SSH to the
real loopback test host lo1, with a real listening socket holding the port."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.preflight.conftest import json_findings, pdctl
from tests.preflight.test_ssh import _by, testbed  # noqa: F401


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_taken_router_metrics_port_fails_preflight_naming_the_field(
    testbed: tuple, tmp_path: Path  # noqa: F811
) -> None:
    hosts, fakebin, tmp = testbed
    if hosts.get("lo1", ("",))[0] != "127.0.0.1":
        pytest.skip("needs the loopback test host lo1 on 127.0.0.1")
    addr, port = hosts["lo1"]
    key = os.environ["PDCTL_TEST_SSH_KEY"]
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    spec = tmp / "spec.yaml"
    spec.write_text(
        "name: rport\nphase: 2\nmodel: {name: meta-llama/Llama-3.1-8B-Instruct, "
        "maxModelLen: 8192}\nengine: {version: '0.33.0'}\nhosts:\n"
        f"  - {{name: lo1, address: '{addr}', port: {port}, user: root, identityFile: '{key}', "
        f"gpus: [0, 1], runtime: conda, hfCache: '{tmp}/hf'}}\n"
        f"prefill: {{replicas: 1, port: {free_port()}}}\n"
        f"decode: {{replicas: 1, port: {free_port()}}}\n"
        "disaggregation: {connector: nixl}\n"
        f"router: {{port: {free_port()}, metricsPort: {taken}}}\n"
    )
    try:
        proc = pdctl("preflight", str(spec), "-o", "json", "--no-transfer", "--known-hosts",
                     os.environ["PDCTL_TEST_KNOWN_HOSTS"], "--remote-path", str(fakebin))
    finally:
        held.close()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (found,) = _by(json_findings(proc), "host.ports", "lo1")
    assert found["status"] == "FAIL"
    assert f"in use: {taken} (router.metricsPort)" in found["found"], found
    assert "(router.metricsPort)" in found["fix"]
