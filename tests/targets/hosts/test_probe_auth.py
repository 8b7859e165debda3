"""Health probes when the engines require an API key (`secrets.apiKey`).

vLLM leaves /health open but answers 401 on /v1/* without `Authorization: Bearer <key>`; the
stand-in engine (fake_vllm.py) enforces the key the same way, read from VLLM_API_KEY as pdctl
renders it. `up` must probe /v1/models with the key (in-process, over the SSH port forward:
never on a command line), and `status` must too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.render.host_scripts import host_scripts
from pdctl.spec import load_text
from pdctl.targets.health import probe
from pdctl.targets.hosts.remote import HostOps
from pdctl.targets.hosts.target import endpoints
from pdctl.targets.state import desired_units
from tests.helpers import checked, wait_port, wait_until
from tests.targets.testbed import HERE, SshEnv, connect, free_port, lo1_spec, pdctl, processes_with

KEY = "sk-pdctl-test-key-7c1e0b"


@pytest.fixture
def engine_with_key(tmp_path: Path):
    """The stand-in engine on a local port, requiring KEY (from VLLM_API_KEY, like vLLM)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "fake_vllm.py"), "serve", "m", "--port", str(port)],
        env={"VLLM_API_KEY": KEY, "PATH": "/usr/bin:/bin"}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, cwd=tmp_path,
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
    key = {"apiKey": {"env": "PDCTL_TEST_API_KEY"}}
    spec = lo1_spec(ssh_env, tmp_path, "auth", fake_venv, port, secrets=key)
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
        status = checked(pdctl("status", str(spec), "-o", "json", *known))
        (row,) = json.loads(status.stdout)["instances"]
        assert row["health"] == "healthy" and row["model"] == "stand-in"
        assert KEY not in status.stdout + status.stderr
    finally:
        pdctl("down", str(spec), *known)


# The router binds `router.listen` (the router host's peer address when the deployment spans
# hosts): `up`/`status` probe it there, over the SSH port forward, and print where clients reach
# it (an SSH tunnel when it listens on loopback of a remote host).
PD = """\
name: pd
phase: 2
model: {{name: Qwen/Qwen3-8B}}
engine: {{version: "0.33.0"}}
hosts:
{hosts}
prefill: {{replicas: 1}}
decode: {{replicas: 1}}
disaggregation: {{connector: nixl}}
router: {{port: 8000, host: gpu-a{listen}}}
"""
TWO = ("  - {name: gpu-a, address: 192.0.2.10, user: ubuntu, gpus: [0]}\n"
       "  - {name: gpu-b, address: 192.0.2.11, user: ubuntu, gpus: [0]}")
ONE = "  - {name: gpu-a, address: 192.0.2.10, user: ubuntu, gpus: [0, 1]}"


def _router(text: str):
    spec, _ = load_text(text, "pd.yaml")
    plan = make_plan(spec)
    desired = desired_units(plan, render(plan))
    return plan, desired, next(d for d in desired if d.role == "router")


def test_router_probe_address_and_endpoint_follow_router_listen() -> None:
    plan, desired, router = _router(PD.format(hosts=TWO, listen=""))
    assert {d.host.name for d in desired} == {"gpu-a", "gpu-b"}
    assert router.address == "192.0.2.10"  # the peer address it binds
    assert endpoints(plan, desired) == ["http://192.0.2.10:8000/v1"]
    plan, desired, router = _router(PD.format(hosts=TWO, listen=", listen: 127.0.0.1"))
    assert router.address == "127.0.0.1"
    (url,) = endpoints(plan, desired)
    assert url.startswith("http://127.0.0.1:8000/v1 on gpu-a (router.listen is loopback: ")
    assert "ssh -L 8000:127.0.0.1:8000 ubuntu@192.0.2.10" in url
    plan, desired, router = _router(PD.format(hosts=TWO, listen=", listen: 0.0.0.0"))
    assert router.address == "127.0.0.1"  # what the host itself reaches
    assert endpoints(plan, desired) == ["http://192.0.2.10:8000/v1"]
    plan, desired, router = _router(PD.format(hosts=ONE, listen=""))
    assert router.address == "127.0.0.1"  # everything on one host: loopback
    assert endpoints(plan, desired) == ["http://127.0.0.1:8000/v1 on gpu-a (router.listen is "
                                        "loopback: ssh -L 8000:127.0.0.1:8000 "
                                        "ubuntu@192.0.2.10)"]


def _node(env: SshEnv):
    if not any(h.name == "node1" for h in env.hosts):
        pytest.skip("no network-namespace test host (node1)")
    return env.host("node1")


def test_probe_reaches_a_listener_bound_to_the_peer_address(ssh_env, tmp_path: Path) -> None:
    """A server bound only to the host's own address (not loopback) is healthy at that address
    and absent at 127.0.0.1: the probe goes where the unit listens."""
    node = _node(ssh_env)
    conn = connect(ssh_env, node.name)
    port = 18791
    # The stand-in writes its own pid (sh's `$$`, kept by exec) as the leader of a session of
    # its own: `$!` of `setsid CMD &` is setsid's pid when setsid has to fork, and killing that
    # left the stand-in running after the test.
    serve = f"{sys.executable} {HERE / 'fake_vllm.py'} serve m --host {node.address} --port {port}"
    script = f"echo $$ >pid.tmp && mv pid.tmp pid && exec {serve}"
    conn.run(f"cd {tmp_path} && setsid sh -c {shlex.quote(script)} >fake.log 2>&1 </dev/null &",
             timeout=30)
    wait_until((tmp_path / "pid").exists, "the stand-in's pid file")
    pid = int((tmp_path / "pid").read_text())
    try:
        ops = HostOps(conn, str(tmp_path / "deploy"), host_scripts())
        # Until it answers: it either does or exits.
        alive = Path(f"/proc/{pid}").exists
        wait_until(lambda: ops.probe(port, "m", address=node.address).ok, "the stand-in", alive,
                   detail=(tmp_path / "fake.log").read_text)
        assert not ops.probe(port, "m").ok  # nothing on the host's loopback
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)  # the stand-in and anything it started
        conn.close()
        # until it is gone (the run's end checks it)
        wait_until(lambda: not _running(pid), "the stopped stand-in", timeout=60)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False
