"""Supervision under a real systemd (PID 1 in the tests/services.sh container at 10.77.3.2, a
Debian 12 rootfs with systemd 252), with the stand-in engine (fake_vllm.py: a real vLLM adds
nothing to what systemd does with a process that dies): a kill -9 is restarted and counted, a
crash loop stops at the start limit and `status` names it, `up` starts it again, a reboot of
the host brings the engine back, and `down` leaves no unit, no process and no file."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import wait_until
from tests.targets.testbed import HERE, pdctl, stand_in_spec, write_spec

ADDRESS = os.environ.get("PDCTL_TEST_SYSTEMD_HOST", "")
CONTAINER = os.environ.get("PDCTL_TEST_SYSTEMD_CONTAINER", "")
DOCKER = os.environ.get("PDCTL_TEST_DOCKER_HOST", "")
DATA = "/var/lib/pdctl-test"
VENV = "/opt/fake"
SERVICES = Path(__file__).resolve().parents[2] / "services.sh"
USER = "pdu"  # a non-root user with lingering on the systemd host (tests/services.sh)


def sh(cmd: str) -> str:
    """A command in the systemd host (docker exec), its output."""
    out = subprocess.run(
        ["docker", "-H", DOCKER, "exec", CONTAINER, "bash", "-c", cmd],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.stdout


def until(what: str, check, seconds: int = 120):
    """Poll `check` each second until it returns something true (tests/helpers.wait_until)."""
    return wait_until(check, what, timeout=seconds, step=1)


@pytest.fixture(scope="module")
def host():
    if not (ADDRESS and CONTAINER and DOCKER):
        pytest.skip("no systemd test host: run `RUN=... tests/services.sh start` (or systemd)")
    subprocess.run(
        ["docker", "-H", DOCKER, "cp", str(HERE / "fake_vllm.py"), f"{CONTAINER}:/tmp/vllm"],
        check=True,
    )
    sh(f"mkdir -p {VENV}/bin && install -m 0755 /tmp/vllm {VENV}/bin/vllm")
    return ADDRESS


def spec_of(tmp_path: Path, name: str, port: int, user: str = "root", data: str = DATA) -> Path:
    entry = {
        "name": "sys1",
        "address": ADDRESS,
        "user": user,
        "identityFile": os.environ["PDCTL_TEST_SSH_KEY"],
        "runtime": "venv",
        "venv": VENV,
        "dataDir": data,
        "supervise": "systemd",
    }
    return write_spec(tmp_path / "spec.yaml", stand_in_spec(name, [entry], {"port": port}))


def known() -> list[str]:
    return ["--known-hosts", os.environ["PDCTL_TEST_KNOWN_HOSTS"]]


def row(spec: Path) -> dict:
    out = pdctl("status", str(spec), "-o", "json", *known())
    return json.loads(out.stdout)["instances"][0]


def show(service: str, user: str = "") -> dict[str, str]:
    """A unit's systemctl properties (`user`: the user manager of that user)."""
    ctl = "systemctl"
    if user:
        ctl = f"runuser -u {user} -- env XDG_RUNTIME_DIR=/run/user/$(id -u {user}) systemctl --user"
    text = sh(f"{ctl} show -p ActiveState -p Result -p NRestarts -p MainPID {service}")
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def reboot() -> None:
    subprocess.run(["docker", "-H", DOCKER, "restart", "-t", "5", CONTAINER], check=True)
    env = dict(os.environ, RUN=os.environ["PDCTL_TEST_RUN"])
    subprocess.run(["bash", str(SERVICES), "systemd-net"], check=True, env=env)


def test_crash_reboot_and_down(host, tmp_path: Path):
    spec = spec_of(tmp_path, "sup", 18301)
    service = "pdctl-sup-sup-serve-0.service"
    up = pdctl("up", str(spec), "--yes", *known(), "--timeout", "60")
    assert up.returncode == 0, up.stdout + up.stderr
    first = row(spec)
    assert (
        first["state"] == "running"
        and first["supervisor"] == "systemd"
        and first["health"] == "healthy"
    ), first
    assert sh(f"systemctl is-enabled {service}").strip() == "enabled"

    # A crash: systemd starts it again and status counts one restart.
    sh(f"kill -9 {first['pid']}")
    until(
        "the restart",
        lambda: show(service)["NRestarts"] == "1" and show(service)["ActiveState"] == "active",
    )
    again = until("health", lambda: (r := row(spec))["health"] == "healthy" and r)
    assert again["state"] == "running (restarted 1 time)", again
    assert again["pid"] != first["pid"]
    logs = pdctl("logs", str(spec), "sup-serve-0", *known())
    assert "fake-vllm serving stand-in" in logs.stdout, logs.stdout + logs.stderr

    # A reboot: the enabled unit starts at boot.
    reboot()
    until("the unit after the reboot", lambda: show(service).get("ActiveState") == "active")
    back = until("health after the reboot", lambda: (r := row(spec))["health"] == "healthy" and r)
    assert back["state"] == "running", back

    down = pdctl("down", str(spec), *known())
    assert down.returncode == 0, down.stdout + down.stderr
    assert sh(
        f"ls /etc/systemd/system/{service} 2>&1; systemctl list-units --all 'pdctl-*' --no-legend"
    ) == (f"ls: cannot access '/etc/systemd/system/{service}': No such file or directory\n")
    assert sh("find /etc/systemd -name 'pdctl-*'") == ""
    assert sh("pgrep -f /opt/fak[e] || true") == ""
    assert sh(f"ls -A {DATA} 2>/dev/null") == ""


def test_crash_loop_stops_at_the_start_limit(host, tmp_path: Path):
    spec = spec_of(tmp_path, "loop", 18311)
    service = "pdctl-loop-loop-serve-0.service"
    up = pdctl("up", str(spec), "--yes", *known(), "--timeout", "60")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        # The engine now fails at every start: systemd gives up after StartLimitBurst starts.
        sh(
            f"mv {VENV}/bin/vllm {VENV}/bin/vllm.ok"
            f" && printf '#!/bin/sh\\nexit 1\\n' >{VENV}/bin/vllm"
            f" && chmod 755 {VENV}/bin/vllm && kill -9 {show(service)['MainPID']}"
        )
        until("the start limit", lambda: show(service)["ActiveState"] == "failed", 120)
        stopped = row(spec)
        assert stopped["state"] == "stopped (start limit hit) (restarted 5 times)", stopped
        # Fixed, `up` resets the limit and starts it again.
        sh(f"mv {VENV}/bin/vllm.ok {VENV}/bin/vllm")
        again = pdctl("up", str(spec), "--yes", *known(), "--timeout", "60")
        assert again.returncode == 0, again.stdout + again.stderr
        assert row(spec)["state"] == "running"
    finally:
        sh(f"[ -f {VENV}/bin/vllm.ok ] && mv {VENV}/bin/vllm.ok {VENV}/bin/vllm")
        pdctl("down", str(spec), *known())


def test_user_units_of_a_lingering_user(host, tmp_path: Path):
    """pdctl as a non-root user (USER, lingering; made by tests/services.sh): user units under
    ~/.config/systemd/user, restarted by the user's manager, started again at boot (lingering
    starts the user manager with no login), and `down` leaves none."""
    home = f"/home/{USER}"
    spec = spec_of(tmp_path, "usr", 18321, user=USER, data=f"{home}/pdctl-test")
    service = "pdctl-usr-usr-serve-0.service"
    unit_file = f"{home}/.config/systemd/user/{service}"
    preflight = pdctl("preflight", str(spec), "-o", "json", "--no-transfer", *known())
    checks = {c["check"]: c for c in json.loads(preflight.stdout)["findings"]}
    assert checks["host.supervise"]["status"] == "PASS", checks["host.supervise"]
    assert f"user units of {USER}" in checks["host.supervise"]["found"]
    up = pdctl("up", str(spec), "--yes", *known(), "--timeout", "60")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        assert sh(f"cat {home}/pdctl-test/usr/usr-serve-0/systemd") == f"user {service}\n"
        first = row(spec)
        assert (first["state"], first["supervisor"]) == ("running", "systemd"), first
        assert sh(f"stat -c %U {unit_file}").strip() == USER
        assert sh(f"ls /etc/systemd/system/{service} 2>/dev/null") == ""  # not a system unit

        sh(f"kill -9 {first['pid']}")
        until(
            "the user manager's restart",
            lambda: (u := show(service, USER))["NRestarts"] == "1" and u["ActiveState"] == "active",
        )
        again = until("health", lambda: (r := row(spec))["health"] == "healthy" and r)
        assert again["state"] == "running (restarted 1 time)", again

        reboot()
        until(
            "the user unit after the reboot",
            lambda: show(service, USER).get("ActiveState") == "active",
        )
        back = until(
            "health after the reboot", lambda: (r := row(spec))["health"] == "healthy" and r
        )
        assert back["state"] == "running", back
    finally:
        down = pdctl("down", str(spec), *known())
    assert down.returncode == 0, down.stdout + down.stderr
    assert sh(f"ls {unit_file} 2>/dev/null; find {home}/.config/systemd -name 'pdctl-*'") == ""
    assert sh(f"pgrep -u {USER} -f /opt/fak[e] || true") == ""
    assert sh(f"ls -A {home}/pdctl-test 2>/dev/null") == ""
