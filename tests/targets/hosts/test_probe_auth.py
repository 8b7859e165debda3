"""Health probes when the engines require an API key (`secrets.apiKey`).

vLLM leaves /health open but answers 401 on /v1/* without `Authorization: Bearer <key>`; the
stand-in engine (fake_vllm.py) enforces the key the same way, read from VLLM_API_KEY as pdctl
renders it. `up` must probe /v1/models with the key (in-process, over the SSH port forward:
never on a command line), and `status` must too.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pdctl.targets.health import probe
from tests.helpers import wait_port
from tests.targets.testbed import (
    HERE,
    SshEnv,
    free_port,
    host_entry,
    pdctl,
    processes_with,
    stand_in_spec,
    write_spec,
)

KEY = "sk-pdctl-test-key-7c1e0b"


def one_host_spec(env: SshEnv, venv: Path, data: Path, port: int) -> dict:
    return stand_in_spec(
        "auth",
        [host_entry(env, env.host("lo1"), data, venv=str(venv))],
        {"replicas": 1, "port": port},
        secrets={"apiKey": {"env": "PDCTL_TEST_API_KEY"}},
    )


@pytest.fixture
def engine_with_key(tmp_path: Path):
    """The stand-in engine on a local port, requiring KEY (from VLLM_API_KEY, like vLLM)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "fake_vllm.py"), "serve", "m", "--port", str(port)],
        env={"VLLM_API_KEY": KEY, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        wait_port(port, alive=lambda: proc.poll() is None, what="the stand-in engine")
        yield port
    finally:
        proc.terminate()
        proc.wait()


def test_probe_sends_the_key_only_as_a_bearer_header(engine_with_key):
    def opener():
        return socket.create_connection(("127.0.0.1", engine_with_key), timeout=5)

    without = probe(opener, "m")
    assert not without.ok
    assert "/v1/models answered 401" in without.detail
    assert "API key" in without.detail
    wrong = probe(opener, "m", api_key="sk-wrong")
    assert not wrong.ok and "refused the API key" in wrong.detail
    assert "sk-wrong" not in wrong.detail
    right = probe(opener, "m", api_key=KEY)
    assert right.ok, right.detail
    assert right.models == ("m",)


def test_up_with_api_key_is_healthy_and_the_key_stays_off_command_lines(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
):
    port = free_port()
    spec = write_spec(tmp_path / "spec.yaml", one_host_spec(ssh_env, fake_venv, tmp_path, port))
    known = ["--known-hosts", ssh_env.known_hosts]
    try:
        up = pdctl(
            "up", str(spec), "--yes", *known, "--timeout", "30", env={"PDCTL_TEST_API_KEY": KEY}
        )
        assert up.returncode == 0, up.stdout + up.stderr
        assert "auth-serve-0 on lo1: healthy" in up.stdout
        assert KEY not in up.stdout + up.stderr
        assert processes_with(KEY) == []
        # The engine really enforces the key: a request without it is refused.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /v1/models HTTP/1.0\r\nHost: x\r\n\r\n")
            assert b" 401 " in sock.recv(200)
        # status reads the key the engines use (the host's 0600 secrets file), not the env.
        status = pdctl("status", str(spec), "-o", "json", *known)
        assert status.returncode == 0, status.stderr
        (row,) = json.loads(status.stdout)["instances"]
        assert row["health"] == "healthy" and row["model"] == "stand-in"
        assert KEY not in status.stdout + status.stderr
    finally:
        pdctl("down", str(spec), *known)
