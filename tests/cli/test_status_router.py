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

from pdctl.cli.specfile import load
from pdctl.cli.top_cmd import _log_events
from pdctl.targets.base import Connect
from pdctl.targets.ssh import SshOptions
from pdctl.top.kv_events import peers_of
from pdctl.top.source import open_source
from pdctl.top.verdict import verdicts
from pdctl.top.window import Window
from tests.helpers import checked, known, wait_until
from tests.targets.testbed import HERE, SshEnv, free_port, host_entry, pdctl, write_spec


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
    out = checked(pdctl("status", str(spec), "-o", "json", *known(env)))
    return json.loads(out.stdout)


LOG = Path(__file__).resolve().parents[1] / "top" / "data" / "nixl-prefill-lease.log"


@pytest.fixture(scope="module")
def deployment(ssh_env: SshEnv, tmp_path_factory: pytest.TempPathFactory):
    """One P/D deployment for the module: stand-in engines, the real vllm-router."""
    if not any(h.name == "lo1" for h in ssh_env.hosts):
        pytest.skip("needs the loopback test host lo1")
    router = router_venv()
    tmp_path = tmp_path_factory.mktemp("rdeg")
    sick = tmp_path / "sick"  # the stand-in's /health answers 503 while it holds its pid
    host = host_entry(ssh_env, ssh_env.host("lo1"), tmp_path, venv=str(engine_venv(tmp_path)))
    ports = {"prefill": free_port(), "decode": free_port()}
    spec = write_spec(tmp_path / "spec.yaml", {
        "name": "rdeg",
        "phase": 2,
        "model": {"name": "stand-in", "servedName": "stand-in"},
        "engine": {"device": "cpu", "env": {"FAKE_VLLM_SICK": str(sick)}},
        "hosts": [host],
        "prefill": {"replicas": 1, "port": ports["prefill"]},
        "decode": {"replicas": 1, "port": ports["decode"]},
        "disaggregation": {"connector": "nixl", "sideChannelPort": free_port()},
        "router": {"port": free_port(), "metricsPort": free_port(), "venv": str(router),
                   "healthCheckIntervalSecs": 1},
    })
    up = pdctl("up", str(spec), "--yes", *known(ssh_env), "--timeout", "120")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield spec, tmp_path, ports, sick
    finally:
        checked(pdctl("down", str(spec), *known(ssh_env)))


def test_top_reads_the_suspect_kv_lines_a_prefill_logged_with_the_pair(
    deployment, ssh_env: SshEnv
) -> None:
    """The recorded lines of a real NIXL prefill (an expired lease, then 'Potentially invalid
    KV blocks'), with this deployment's ports in vllm-router's request id, appended to the
    prefill's log between two reads of the logs over SSH (as `top` and `bench` read them): two
    kv-suspect verdicts name the pair; the lines that were there before count no more."""
    spec, tmp_path, ports, _ = deployment
    lines = LOG.read_text().replace("127.0.0.1:18810", f"127.0.0.1:{ports['prefill']}")
    lines = lines.replace("127.0.0.1:18820", f"127.0.0.1:{ports['decode']}")
    log = tmp_path / "lo1" / "rdeg" / "rdeg-prefill-0" / "log"
    plan, bundle = load(str(spec), None, None)
    source = open_source(plan, bundle, Connect(ssh=SshOptions(known_hosts=ssh_env.known_hosts)))
    try:
        before = source.logs()
        assert "rdeg-prefill-0" in before and "rdeg-decode-0" in before, before.keys()
        with log.open("a") as fh:
            fh.write(lines)
        after = source.logs()
        events = _log_events(plan, source, before, after)
        again = _log_events(plan, source, after, source.logs())
    finally:
        source.close()
    found = verdicts(Window("rdeg", 2, "hosts", 60.0, ()), events=events,
                     peers=peers_of(plan))
    pair = "rdeg-prefill-0 -> rdeg-decode-0"
    assert [v.line.split(" (", 1)[0] for v in found] == [
        f"{pair}: 1 lease-expired event", f"{pair}: 1 invalid-kv event"]
    assert again == []


def test_a_router_with_no_healthy_decode_is_degraded(
    deployment, ssh_env: SshEnv
) -> None:
    spec, tmp_path, _, sick = deployment
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
    assert "decode 0/1, router 0/1 degraded)" in " ".join(table.stdout.split()), table.stdout
