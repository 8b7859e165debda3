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

from tests.helpers import checked, wait_until
from tests.targets.testbed import HERE, pdctl, stand_in_spec, write_spec

# Restart windows of seconds (RestartSec 10 s, the guard's 5 s loss window): under a second
# worker's load a group restart was seen to miss them (CI runs this module alone, noxfile.py).
pytestmark = pytest.mark.alone

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
        ["docker", "-H", DOCKER, "exec", CONTAINER, "bash", "-c", cmd], capture_output=True,
        text=True, timeout=120,
    )
    return out.stdout


def until(what: str, check, seconds: int = 120, detail=lambda: ""):
    """Poll `check` each second until it returns something true (tests/helpers.wait_until)."""
    return wait_until(check, what, timeout=seconds, step=1, detail=detail)


def journals(*units: tuple[str, str]) -> str:
    """The restart counts and the journal ends of (service, user) units: a failure's story."""
    out = []
    for service, user in units:
        flag = f"_SYSTEMD_USER_UNIT={service}" if user else f"-u {service}"
        out.append(f"\n--- {service}: {show(service, user)}\n"
                   + sh(f"journalctl {flag} --no-pager -o short-precise | tail -40"))
    return "".join(out)


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


def spec_of(
    tmp_path: Path, name: str, serve: dict, hosts: list[dict], engine: dict | None = None
) -> Path:
    """The stand-in's spec on `hosts` (name, address, dataDir, ...), each a systemd-supervised
    venv host reached with the test key."""
    for h in hosts:
        h.update(identityFile=os.environ["PDCTL_TEST_SSH_KEY"], runtime="venv", venv=VENV)
        h.update(supervise="systemd")
    return write_spec(tmp_path / "spec.yaml", stand_in_spec(name, hosts, serve, engine))


def one_host(user: str = "root", data: str = DATA) -> list[dict]:
    return [{"name": "sys1", "address": ADDRESS, "user": user, "dataDir": data}]


def two_hosts(data: str) -> list[dict]:
    """Root's system manager at ADDRESS, USER's user manager at SECOND (`two_managers`)."""
    return [
        {"name": "sysr", "address": ADDRESS, "dataDir": DATA},
        {"name": "sysu", "address": SECOND, "user": USER, "dataDir": f"/home/{USER}/{data}"},
    ]


def known() -> list[str]:
    return ["--known-hosts", os.environ["PDCTL_TEST_KNOWN_HOSTS"]]


def rows(spec: Path, known_hosts: list[str]) -> dict[str, dict]:
    out = pdctl("status", str(spec), "-o", "json", *known_hosts)
    return {r["unit"]: r for r in json.loads(out.stdout)["instances"]}


def row(spec: Path) -> dict:
    (only,) = rows(spec, known()).values()
    return only


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


def restarted_once(spec: Path, service: str, user: str = "") -> dict:
    """Until `service`'s manager restarted it once and its unit is healthy again: its row,
    which counts the restart."""
    until("the restart",
          lambda: (u := show(service, user))["NRestarts"] == "1" and u["ActiveState"] == "active")
    again = until("health", lambda: (r := row(spec))["health"] == "healthy" and r)
    assert again["state"] == "running (restarted 1 time)", again
    return again


def rebooted(spec: Path, service: str, user: str = "") -> None:
    """A reboot of the host: the enabled unit starts at boot and its engine serves again."""
    reboot()
    until("the unit after the reboot", lambda: show(service, user).get("ActiveState") == "active")
    back = until("health after the reboot", lambda: (r := row(spec))["health"] == "healthy" and r)
    assert back["state"] == "running", back


def test_crash_reboot_and_down(host, tmp_path: Path):
    spec = spec_of(tmp_path, "sup", {"port": 18301}, one_host())
    service = "pdctl-sup-sup-serve-0.service"
    checked(pdctl("up", str(spec), "--yes", *known(), "--timeout", "60"))
    first = row(spec)
    assert (
        first["state"] == "running"
        and first["supervisor"] == "systemd"
        and first["health"] == "healthy"
    ), first
    assert sh(f"systemctl is-enabled {service}").strip() == "enabled"

    # A crash: systemd starts it again and status counts one restart.
    sh(f"kill -9 {first['pid']}")
    assert restarted_once(spec, service)["pid"] != first["pid"]
    logs = pdctl("logs", str(spec), "sup-serve-0", *known())
    assert "fake-vllm serving stand-in" in logs.stdout, logs.stdout + logs.stderr
    rebooted(spec, service)

    checked(pdctl("down", str(spec), *known()))
    assert sh(
        f"ls /etc/systemd/system/{service} 2>&1; systemctl list-units --all 'pdctl-*' --no-legend"
    ) == (f"ls: cannot access '/etc/systemd/system/{service}': No such file or directory\n")
    assert sh("find /etc/systemd -name 'pdctl-*'") == ""
    assert sh("pgrep -f /opt/fak[e] || true") == ""
    assert sh(f"ls -A {DATA} 2>/dev/null") == ""


def test_crash_loop_stops_at_the_start_limit(host, tmp_path: Path):
    spec = spec_of(tmp_path, "loop", {"port": 18311}, one_host())
    service = "pdctl-loop-loop-serve-0.service"
    checked(pdctl("up", str(spec), "--yes", *known(), "--timeout", "60"))
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
        checked(pdctl("up", str(spec), "--yes", *known(), "--timeout", "60"))
        assert row(spec)["state"] == "running"
    finally:
        sh(f"[ -f {VENV}/bin/vllm.ok ] && mv {VENV}/bin/vllm.ok {VENV}/bin/vllm")
        pdctl("down", str(spec), *known())


def test_user_units_of_a_lingering_user(host, tmp_path: Path):
    """pdctl as a non-root user (USER, lingering; made by tests/services.sh): user units under
    ~/.config/systemd/user, restarted by the user's manager, started again at boot (lingering
    starts the user manager with no login), and `down` leaves none."""
    home = f"/home/{USER}"
    spec = spec_of(tmp_path, "usr", {"port": 18321}, one_host(USER, f"{home}/pdctl-test"))
    service = "pdctl-usr-usr-serve-0.service"
    unit_file = f"{home}/.config/systemd/user/{service}"
    preflight = pdctl("preflight", str(spec), "-o", "json", "--no-transfer", *known())
    checks = {c["check"]: c for c in json.loads(preflight.stdout)["findings"]}
    assert checks["host.supervise"]["status"] == "PASS", checks["host.supervise"]
    assert f"user units of {USER}" in checks["host.supervise"]["found"]
    checked(pdctl("up", str(spec), "--yes", *known(), "--timeout", "60"))
    try:
        assert sh(f"cat {home}/pdctl-test/usr/usr-serve-0/systemd") == f"user {service}\n"
        first = row(spec)
        assert (first["state"], first["supervisor"]) == ("running", "systemd"), first
        assert sh(f"stat -c %U {unit_file}").strip() == USER
        assert sh(f"ls /etc/systemd/system/{service} 2>/dev/null") == ""  # not a system unit

        sh(f"kill -9 {first['pid']}")
        restarted_once(spec, service, USER)  # by the user's manager
        rebooted(spec, service, USER)
    finally:
        down = pdctl("down", str(spec), *known())
    assert down.returncode == 0, down.stdout + down.stderr
    assert sh(f"ls {unit_file} 2>/dev/null; find {home}/.config/systemd -name 'pdctl-*'") == ""
    assert sh(f"pgrep -u {USER} -f /opt/fak[e] || true") == ""
    assert sh(f"ls -A {home}/pdctl-test 2>/dev/null") == ""


SECOND = "10.77.3.3"  # a second address of the systemd host, for the group's second node


@pytest.fixture
def two_managers(host, tmp_path: Path):
    """Two hosts for one group: root's system manager at ADDRESS and USER's user manager at
    SECOND (the same machine: two service managers that know nothing of each other, as two
    hosts' systemds do), and a known_hosts file that knows the host at both addresses."""
    sh(f"ip addr add {SECOND}/24 dev eth0")
    lines = Path(os.environ["PDCTL_TEST_KNOWN_HOSTS"]).read_text().splitlines()
    key = next(line.split(" ", 1)[1] for line in lines if line.startswith(ADDRESS + " "))
    known_file = tmp_path / "known_hosts"
    known_file.write_text("\n".join([*lines, f"{SECOND} {key}"]) + "\n")
    yield ["--known-hosts", str(known_file)]
    sh(f"ip addr del {SECOND}/24 dev eth0")


# A multi-node group whose nodes two service managers supervise: a worker node's engine dies,
# its manager restarts its unit, and the leader's group guard stops the leader (which its own
# manager restarts), so the group meets again as one. The stand-in runs with FAKE_VLLM_DEAF:
# like vLLM, its leader does not notice that a headless node died.
GROUPS = {
    # a tensor-parallel node's engine crashes (its guard, the unit's main process, passes that on)
    "crash": ("grp", {"tensorParallel": 2}, {}),
    # a headless data-parallel node whose EngineCore dies exits 0 (vLLM's process shape,
    # FAKE_VLLM_ENGINE_CORE): its guard turns that into a failure
    "engine-core": ("dpg", {"dataParallel": 2}, {"FAKE_VLLM_ENGINE_CORE": "1"}),
}


@pytest.mark.parametrize("case", GROUPS)
def test_a_group_restarts_as_one_when_a_node_dies(case: str, two_managers, tmp_path: Path):
    name, parallel, engine_env = GROUPS[case]
    base = 18331 if case == "crash" else 18361
    serve = {**parallel, "nodes": 2, "port": base, "rendezvousPort": base + 1}
    engine = {"device": "cpu", "env": {**engine_env, "FAKE_VLLM_DEAF": "1"}}
    spec = spec_of(tmp_path, name, serve, two_hosts(name), engine)
    lead, node = f"{name}-serve-0", f"{name}-serve-0-node1"
    leader, worker = f"pdctl-{name}-{lead}.service", f"pdctl-{name}-{node}.service"

    up = pdctl("up", str(spec), "--yes", *two_managers, "--timeout", "60")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        first = rows(spec, two_managers)
        assert first[lead]["health"] == "healthy", first
        assert {r["supervisor"] for r in first.values()} == {"systemd"}, first

        # The guard acts on a node it has heard from (never on one still starting).
        until(
            "the leader's guard heard the worker",
            lambda: f"pdctl-guard: heard from {node}"
            in pdctl("logs", str(spec), lead, *two_managers).stdout,
        )
        if case == "crash":
            sh(f"pkill -KILL -P {first[node]['pid']}")
        else:  # the worker's unit: its guard, the headless node under it, the EngineCore
            under = sh(f"pgrep -P {first[node]['pid']}").split()
            core = sh(f"pgrep -P {under[0]}").split() if len(under) == 1 else []
            assert len(core) == 1, (under, core)
            sh(f"kill -9 {core[0]}")
        until(
            "both units restarted once",
            lambda: show(worker, USER)["NRestarts"] == "1" and show(leader)["NRestarts"] == "1",
            detail=lambda: journals((worker, USER), (leader, "")),
        )
        again = until(
            "the group answers again",
            lambda: (r := rows(spec, two_managers))[lead]["health"] == "healthy" and r,
        )
        assert again[lead]["state"] == "running (restarted 1 time)", again
        assert again[node]["state"] == "running (restarted 1 time)", again
        if case == "crash":
            log = pdctl("logs", str(spec), lead, *two_managers).stdout
            assert f"pdctl-guard: {node} ({SECOND}:29700) has not answered for" in log
            assert f"stopping {lead} so that its group starts again as one" in log
            # The restarted leader met the restarted worker.
            assert "rank 1 joined from" in log.split("so that its group starts again as one")[1]
        else:
            log = pdctl("logs", str(spec), node, *two_managers).stdout
            assert "exited with status 0 though nothing asked it to stop" in log, log
    finally:
        down = pdctl("down", str(spec), *two_managers)
    assert down.returncode == 0, down.stdout + down.stderr
    assert sh("pgrep -f /opt/fak[e] || true") == ""


# vLLM's process shape (fake_vllm.py FAKE_VLLM_ENGINE_CORE): an API server (or headless node)
# with an EngineCore child; when the child dies, the parent exits 0 (vllm#48966).
ENGINE_CORE = {"device": "cpu", "env": {"FAKE_VLLM_ENGINE_CORE": "1"}}


def temp_files() -> set[str]:
    """vLLM's temporary files in the systemd host's /tmp (the stand-in's, named as vLLM's)."""
    out = sh("find /tmp -maxdepth 1 \\( -name 'vllm_dist_*' -o -type s \\) 2>/dev/null")
    return set(out.split())


def test_an_engine_whose_engine_core_dies_is_restarted(host, tmp_path: Path):
    """kill -9 of the EngineCore (not the API server): the API server exits 0, and the unit
    restarts all the same (Restart=always); `down` still stops it for good and leaves none of
    its temporary files (its TMPDIR is in its unit folder)."""
    before = temp_files()
    spec = spec_of(tmp_path, "core", {"port": 18351}, one_host(), ENGINE_CORE)
    service = "pdctl-core-core-serve-0.service"
    up = pdctl("up", str(spec), "--yes", *known(), "--timeout", "60")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        first = row(spec)
        assert (first["state"], first["health"]) == ("running", "healthy"), first
        core = sh(f"pgrep -P {first['pid']}").split()
        assert len(core) == 1, core  # the API server's EngineCore child
        assert sh(f"systemctl show -p LimitMEMLOCK --value {service}").strip() == "infinity"

        sh(f"kill -9 {core[0]}")
        assert restarted_once(spec, service)["pid"] != first["pid"]
        log = pdctl("logs", str(spec), "core-serve-0", *known()).stdout
        assert "EngineCore_DP0 died unexpectedly" in log, log
    finally:
        down = pdctl("down", str(spec), *known())
    assert down.returncode == 0, down.stdout + down.stderr
    assert sh(f"systemctl list-units --all {service} --no-legend") == ""
    assert sh("pgrep -f /opt/fak[e] || true") == ""
    assert sh(f"ls -A {DATA} 2>/dev/null") == ""
    assert temp_files() - before == set()


def test_preflight_measures_memlock_where_the_units_run(two_managers, tmp_path: Path):
    """group.memlock on RDMA hosts reads the limit of a systemd unit like the engines' (a
    transient unit with LimitMEMLOCK=infinity; for the lingering user, its manager's hard
    limit), not the SSH login shell's, and says so."""
    hosts = [{**h, "rdmaDevices": ["mlx5_0"]} for h in two_hosts("mem")]
    serve = {"tensorParallel": 2, "nodes": 2, "port": 18371, "rendezvousPort": 18372}
    spec = spec_of(tmp_path, "mem", serve, hosts)
    out = pdctl("preflight", str(spec), "-o", "json", "--no-transfer", *two_managers)
    found = {
        f["where"]: f for f in json.loads(out.stdout)["findings"] if f["check"] == "group.memlock"
    }
    unit = sh("systemd-run --wait --pipe --quiet -p LimitMEMLOCK=infinity sh -c 'ulimit -l'")
    # What a unit gets: the test container's hard limit (8192 KiB in CI's container).
    limit = "unlimited" if unit.strip() == "unlimited" else f"{unit.strip()} KiB"
    assert found["sysr"]["found"] == f"ulimit -l: {limit} (in a system unit)", found
    assert found["sysu"]["found"] == (
        f"ulimit -l: {limit} (in a user unit of {USER}, its service manager's hard limit)"
    ), found
