"""`pdctl status` with the real vllm-router (issue 36): a P/D deployment of stand-in engines
on a real SSH host behind vllm-router 0.1.17 (from the vLLM CPU build folder,
PDCTL_TEST_VLLM_DIR/router). While the decode's /health answers 503, the router's /liveness
still answers 200 and every request gets 503 "No available workers: 1 prefill, 0 decode";
status must show the router `degraded` with the router's own words, and count it as not up."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import known, wait_until
from tests.targets.testbed import (  # noqa: F401
    HERE,
    SshEnv,
    free_port,
    host_entry,
    pdctl,
    ssh_env,
    write_spec,
)


def router_venv() -> Path:
    folder = Path(os.environ.get("PDCTL_TEST_VLLM_DIR", "/tmp/pdctl-ci/vllm-cpu")) / "router"
    if not (folder / "bin" / "vllm-router").exists():
        pytest.skip(f"no vllm-router in {folder} (tests/e2e/prepare_vllm_cpu.sh installs it)")
    return folder


def engine_venv(tmp: Path) -> Path:
    venv = tmp / "engine-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    shutil.copy(HERE / "fake_vllm.py", venv / "bin" / "vllm")
    (venv / "bin" / "vllm").chmod(0o755)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "nixl.py").write_text("# stand-in: start.sh checks `import nixl`\n")
    return venv


def rows_of(spec: Path, env: SshEnv) -> dict:
    out = pdctl("status", str(spec), "-o", "json", *known(env))
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def test_a_router_with_no_healthy_decode_is_degraded(
    ssh_env: SshEnv, tmp_path: Path  # noqa: F811
) -> None:
    if not any(h.name == "lo1" for h in ssh_env.hosts):
        pytest.skip("needs the loopback test host lo1")
    router = router_venv()
    sick = tmp_path / "sick"  # the stand-in's /health answers 503 while it holds its pid
    host = host_entry(ssh_env, ssh_env.host("lo1"), tmp_path, venv=str(engine_venv(tmp_path)))
    spec = write_spec(tmp_path / "spec.yaml", {
        "name": "rdeg",
        "phase": 2,
        "model": {"name": "stand-in", "servedName": "stand-in"},
        "engine": {"device": "cpu", "env": {"FAKE_VLLM_SICK": str(sick)}},
        "hosts": [host],
        "prefill": {"replicas": 1, "port": free_port()},
        "decode": {"replicas": 1, "port": free_port()},
        "disaggregation": {"connector": "nixl", "sideChannelPort": free_port()},
        "router": {"port": free_port(), "metricsPort": free_port(), "venv": str(router),
                   "healthCheckIntervalSecs": 1},
    })
    try:
        up = pdctl("up", str(spec), "--yes", *known(ssh_env), "--timeout", "120")
        assert up.returncode == 0, up.stdout + up.stderr
        table = pdctl("status", str(spec), *known(ssh_env))
        assert "3 of 3 units up (prefill 1/1, decode 1/1, router 1/1)" in table.stdout, (
            table.stdout)
        decode = tmp_path / "lo1" / "rdeg" / "rdeg-decode-0" / "pid"
        sick.write_text(decode.read_text().strip())

        def degraded() -> dict | None:
            doc = rows_of(spec, ssh_env)
            r = next(r for r in doc["instances"] if r["role"] == "router")
            # the engine rows say it at once; the router after its failed health checks
            return doc if "the router sees" in r["why"] else None

        doc = wait_until(degraded, "status shows the router's own view", timeout=90, step=1)
        r = next(r for r in doc["instances"] if r["role"] == "router")
        assert "the router sees 0 of 1 decode healthy (its /readiness)" in r["why"], r
        assert doc["summary"]["degraded"] == ["rdeg-router"]
        assert doc["summary"]["upByRole"]["router"] == 0
        table = pdctl("status", str(spec), *known(ssh_env))
        assert "1 of 3 units up (prefill 1/1, decode 0/1, router 0/1 degraded)" in " ".join(
            table.stdout.split()), table.stdout
    finally:
        down = pdctl("down", str(spec), *known(ssh_env))
    assert down.returncode == 0, down.stdout + down.stderr
