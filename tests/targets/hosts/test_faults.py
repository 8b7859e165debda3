"""Faults during `up`, `down` and `status` over real SSH: a host whose link goes down or whose
sshd is killed mid-`up`, an engine killed with SIGKILL, a bad update after a good one, Ctrl-C
at each step. After each: one line naming host and step (no traceback), nothing orphaned that
the message does not name, and the last good version serving (or nothing, as it says)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pdctl.errors import PdctlError
from tests.helpers import checked, wait_until
from tests.targets.faulthost import start_fault_host, stop_fault_host
from tests.targets.testbed import (
    SshEnv,
    TestHost,
    connect,
    free_port,
    host_entry,
    pdctl,
    processes_in,
    stand_in_spec,
    write_spec,
)


def test_run_gives_up_after_its_timeout_naming_host_and_step(ssh_env: SshEnv, tmp_path: Path):
    conn = connect(ssh_env)
    try:
        with pytest.raises(PdctlError) as info:
            conn.run(f"sleep 12; touch {tmp_path}/finished", timeout=2, step="starting u-1")
        line = info.value.line()
        assert line.startswith("host lo1 (127.0.0.1:2222): "), line
        assert "starting u-1" in line and "2 s" in line, line
        assert not (tmp_path / "finished").exists()  # it returned before the command ended
        assert conn.run("echo still usable", timeout=10).out.strip() == "still usable"
    finally:
        conn.close()


# -- CLI-level faults ----------------------------------------------------------------------------

SECRET = {"PDCTL_TEST_HF_TOKEN": "x"}


@pytest.fixture
def fault_host(ssh_env: SshEnv, tmp_path: Path):
    """An sshd of this test's own in its own network namespace (see faulthost.py)."""
    fault = start_fault_host(ssh_env, tmp_path)
    yield fault
    stop_fault_host(fault)


def spec_with(env: SshEnv, venv: Path, data: Path, hosts: list[TestHost], **engine_env: str):
    """Two stand-in engines, one per host, on one port (the hosts have separate networks)."""
    engine = {"device": "cpu", "env": dict(engine_env)} if engine_env else None
    spec = stand_in_spec(
        "fake", [host_entry(env, h, data, venv=str(venv)) for h in hosts],
        {"replicas": len(hosts), "port": free_port()}, engine=engine,
        secrets={"hfToken": {"env": "PDCTL_TEST_HF_TOKEN"}},
    )
    return write_spec(data / "spec.yaml", spec)


def lo1_and_node1(env: SshEnv) -> list[TestHost]:
    if "node1" not in [h.name for h in env.hosts]:
        pytest.skip("needs the network-namespace test host node1")
    return [env.host("lo1"), env.host("node1")]


def set_env(spec: Path, **engine_env: str) -> None:
    data = yaml.safe_load(spec.read_text())
    data["engine"]["env"] = dict(engine_env)
    spec.write_text(yaml.safe_dump(data, sort_keys=False))


def status(spec: Path, known_hosts: str) -> tuple[int, dict]:
    proc = pdctl("status", str(spec), "-o", "json", "--known-hosts", known_hosts)
    return proc.returncode, json.loads(proc.stdout)


LOG_WRITER = b"path, cap, keep = sys.argv"  # templates/process-start.sh.j2's rotating writer


def engines(folder: Path) -> dict[str, set[int]]:
    """Unit folder name -> process groups running there (every stand-in engine is one)."""
    groups: dict[str, set[int]] = {}
    for line in processes_in(folder):
        pid, cwd = line.split(": ", 1)
        try:
            if LOG_WRITER in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue  # start.sh's log writer: it ends when the engine closes its output
            groups.setdefault(Path(cwd).name, set()).add(os.getpgid(int(pid)))
        except (ProcessLookupError, FileNotFoundError):
            continue
    return groups


def kill_all_in(folder: Path) -> None:
    for groups in engines(folder).values():
        for pgid in groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Up:
    """`pdctl up` in a subprocess whose output the test reads line by line."""

    def __init__(self, spec: Path, known_hosts: str, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "pdctl", "up", str(spec), "--yes", "--known-hosts",
                known_hosts, *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **SECRET, "COLUMNS": "200"},
        )
        self.lines: list[str] = []

    def wait_for(self, text: str) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if text in line:
                return
        raise AssertionError(f"`up` ended before {text!r}:\n{''.join(self.lines)}")

    def finish(self) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=300)
        return self.proc.returncode, "".join(self.lines) + out, err


def wait_pid_file(path: Path, up: Up) -> int:
    """The pid in `path` once start.sh wrote it, while `up` runs: a run that ended will never
    write it, and waiting on regardless would hang the suite instead of failing this test."""
    while not (path.exists() and path.read_text().strip()):
        if up.proc.poll() is not None:
            rc, out, err = up.finish()
            raise AssertionError(f"`up` ended (exit {rc}) before {path} was written:\n{out}{err}")
        time.sleep(0.1)
    return int(path.read_text())


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    # the spec's own warnings (the replicas hint: 2 replicas, no router) come before it
    (line,) = [ln for ln in err.strip().splitlines() if ": warning: " not in ln]
    return line


@pytest.mark.parametrize("fault", ["link down", "sshd killed"])
def test_host_lost_mid_up_is_one_line_and_the_rest_is_stopped(
    fault: str, ssh_env, fault_host, fake_venv, tmp_path
):
    hosts = [ssh_env.host("lo1"), fault_host.host]
    spec = spec_with(ssh_env, fake_venv, tmp_path, hosts, FAKE_VLLM_HANG="1")  # never healthy
    up = Up(spec, fault_host.known_hosts, "--timeout", "300")
    try:
        up.wait_for("starting fake-serve-1")
        wait_pid_file(tmp_path / "faulty" / "fake" / "fake-serve-1" / "pid", up)
        wait_pid_file(tmp_path / "lo1" / "fake" / "fake-serve-0" / "pid", up)
        if fault == "link down":
            fault_host.link(up=False)
        else:
            fault_host.kill_sshd()
        rc, out, err = up.finish()
        line = one_error_line(err)
        assert rc == 1, out + err
        assert line.startswith(
            f"error: up failed: host faulty ({fault_host.host.address}:22): connection lost while "
        ), line
        assert "stopped what this run started: fake-serve-0" in line
        assert "NOT undone: fake-serve-1 on faulty: host lost, it may still be running" in line
        # Nothing orphaned that the message does not name: only fake-serve-1 on the lost host.
        assert engines(tmp_path / "lo1") == {}
        assert list(engines(tmp_path / "faulty")) == ["fake-serve-1"]
    finally:
        fault_host.link(up=True)
        kill_all_in(tmp_path)


def test_down_and_status_with_a_host_unreachable(ssh_env, fault_host, fake_venv, tmp_path):
    hosts = [ssh_env.host("lo1"), fault_host.host]
    spec = spec_with(ssh_env, fake_venv, tmp_path, hosts)
    known_hosts = fault_host.known_hosts
    try:
        checked(pdctl("up", str(spec), "--yes", "--known-hosts", known_hosts, env=SECRET))
        fault_host.kill_sshd()
        proc = checked(pdctl("status", str(spec), "-o", "json", "--known-hosts", known_hosts), 1)
        one_error_line(proc.stderr)
        data = json.loads(proc.stdout)
        rows = {r["unit"]: r for r in data["instances"]}
        assert rows["fake-serve-0"]["health"] == "healthy"
        assert rows["fake-serve-1"]["health"] == "unreachable"
        assert rows["fake-serve-1"]["host"] == "faulty"
        assert [u["host"] for u in data["unreachable"]] == ["faulty"]
        table = pdctl("status", str(spec), "--known-hosts", known_hosts)
        assert table.returncode == 1 and "unreachable" in table.stdout

        down = checked(pdctl("down", str(spec), "--known-hosts", known_hosts), 1)
        line = one_error_line(down.stderr)
        assert "could not reach faulty (fake-serve-1)" in line, line
        assert "stopped fake-serve-0 on lo1" in down.stdout
        assert "NOT stopped on faulty: fake-serve-1" in down.stdout
        # start.sh's log writer may still be exiting (its cmdline already gone): it is in
        # start.sh's group, not the engine's, and ends on its own
        wait_until(lambda: engines(tmp_path / "lo1") == {}, "lo1's processes gone", timeout=20)
        assert not (tmp_path / "lo1" / "fake").exists()
        assert list(engines(tmp_path / "faulty")) == ["fake-serve-1"]  # as the message says
    finally:
        kill_all_in(tmp_path)


@pytest.fixture
def good(ssh_env: SshEnv, fake_venv: Path, tmp_path: Path):
    """A good deployment on lo1 and node1: (spec, pids); afterwards the good spec goes down,
    and nothing of it runs."""
    spec = spec_with(ssh_env, fake_venv, tmp_path, lo1_and_node1(ssh_env), GOOD="1")
    checked(pdctl("up", str(spec), "--yes", "--known-hosts", ssh_env.known_hosts, env=SECRET))
    yield spec, pids(spec, ssh_env)
    set_env(spec, GOOD="1")
    pdctl("down", str(spec), "--known-hosts", ssh_env.known_hosts)
    assert processes_in(tmp_path) == []


def pids(spec: Path, env: SshEnv) -> dict[str, str]:
    rc, data = status(spec, env.known_hosts)
    assert rc == 0, data
    return {r["unit"]: r["pid"] for r in data["instances"]}


def assert_good_version_serves(spec: Path, env: SshEnv, data: Path) -> None:
    """Both units run the good spec (not outdated), healthy, one engine each, no other."""
    rc, status_data = status(spec, env.known_hosts)
    assert rc == 0
    for row in status_data["instances"]:
        assert (row["state"], row["health"]) == ("running", "healthy"), row
    assert {k: len(v) for k, v in engines(data).items()} == {"fake-serve-0": 1, "fake-serve-1": 1}


def up_bad_model(spec: Path, env: SshEnv, *extra: str):  # type: ignore[no-untyped-def]
    """`up` of `spec` with a model path that does not exist (bad.yaml beside it)."""
    data = yaml.safe_load(spec.read_text())
    data["model"]["name"] = "/nonexistent/model"
    bad = write_spec(spec.parent / "bad.yaml", data)
    up = pdctl("up", str(bad), "--yes", *extra, "--known-hosts", env.known_hosts, env=SECRET)
    assert up.returncode == 1, up.stdout + up.stderr
    return up


def test_bad_update_after_a_good_one_restores_the_previous_version(good, ssh_env, tmp_path):
    spec, before = good
    up = up_bad_model(spec, ssh_env)
    line = one_error_line(up.stderr)
    assert "fake-serve-0 on host lo1 failed: the process exited" in line, line
    assert "model path /nonexistent/model does not exist" in line
    assert "restored the previous version of fake-serve-0 (healthy)" in line, line
    assert "restored the previous version of fake-serve-0 (healthy)" in up.stdout
    after = pids(spec, ssh_env)
    assert after["fake-serve-1"] == before["fake-serve-1"]  # never touched: one at a time
    assert after["fake-serve-0"] != before["fake-serve-0"]  # the good version, restarted
    assert_good_version_serves(spec, ssh_env, tmp_path)
    unit = tmp_path / "lo1" / "fake" / "fake-serve-0"
    assert (unit / "previous" / "start.sh").read_text() == (unit / "start.sh").read_text()


def test_engine_killed_during_a_replacement_brings_the_previous_back(good, ssh_env, tmp_path):
    spec, before = good
    set_env(spec, FAKE_VLLM_HANG="1")  # the new version: alive, never healthy
    up = Up(spec, ssh_env.known_hosts, "--timeout", "300")
    up.wait_for("starting fake-serve-0")
    pid_file = tmp_path / "lo1" / "fake" / "fake-serve-0" / "pid"
    old = int(before["fake-serve-0"])
    new = wait_until(lambda: (n := wait_pid_file(pid_file, up)) != old and n, "a new pid")
    os.killpg(new, signal.SIGKILL)
    rc, out, err = up.finish()
    assert rc == 1, out + err
    line = one_error_line(err)
    assert (
        "fake-serve-0 on host lo1 failed: the process exited before it became healthy" in line
    ), line
    assert "restored the previous version of fake-serve-0 (healthy)" in line, line
    set_env(spec, GOOD="1")
    assert pids(spec, ssh_env)["fake-serve-1"] == before["fake-serve-1"]
    assert_good_version_serves(spec, ssh_env, tmp_path)


def wait_until_serving(spec: Path, env: SshEnv) -> None:
    """Until status says every unit is healthy (a restored unit may still be starting)."""
    def serving() -> bool:
        rc, data = status(spec, env.known_hosts)
        return rc == 0 and all(r["health"] == "healthy" for r in data["instances"])

    wait_until(serving, "every unit healthy", step=0.2)


@pytest.mark.parametrize(
    "when",
    [
        "replacing fake-serve-0",  # before its running version is stopped
        "stopped the running version",  # between stopping it and starting the new one
        "starting fake-serve-0",  # while the new one starts and is waited for
        "twice",  # once while waiting, again while the previous version comes back
    ],
)
def test_ctrl_c_during_a_replacement_brings_the_previous_version_back(
    when: str, good, ssh_env, tmp_path
):
    spec, before = good
    set_env(spec, FAKE_VLLM_HANG="1")  # the new version: alive, never healthy
    up = Up(spec, ssh_env.known_hosts, "--timeout", "300")
    up.wait_for("starting fake-serve-0" if when == "twice" else when)
    up.proc.send_signal(signal.SIGINT)
    if when == "twice":
        up.wait_for("interrupted (Ctrl-C): undoing this run")
        up.proc.send_signal(signal.SIGINT)
    rc, out, err = up.finish()
    assert rc == 1, out + err
    line = one_error_line(err)
    restored = "restored the previous version of fake-serve-0 ("
    assert line.startswith(f"error: up failed: interrupted (Ctrl-C); {restored}"), line
    state = line.split(restored, 1)[1]
    if when == "twice":  # told not to wait: it says so, unless it was healthy at once
        assert state.startswith(("healthy)", "not waited for: Ctrl-C)")), line
    else:
        assert state.startswith("healthy)"), line
    set_env(spec, GOOD="1")
    wait_until_serving(spec, ssh_env)
    assert pids(spec, ssh_env)["fake-serve-1"] == before["fake-serve-1"]
    assert_good_version_serves(spec, ssh_env, tmp_path)


def test_ctrl_c_while_reading_the_hosts_changes_nothing(good, ssh_env, tmp_path):
    spec, before = good
    set_env(spec, CHANGED="1")
    up = Up(spec, ssh_env.known_hosts)
    up.wait_for("connected to")
    up.proc.send_signal(signal.SIGINT)
    rc, out, err = up.finish()
    assert rc == 130 and "Traceback" not in err, out + err
    set_env(spec, GOOD="1")
    assert pids(spec, ssh_env) == before
    assert_good_version_serves(spec, ssh_env, tmp_path)


def test_keep_going_undoes_each_failed_unit_and_goes_on(good, ssh_env, tmp_path):
    spec, _ = good
    up = up_bad_model(spec, ssh_env, "--keep-going")
    line = one_error_line(up.stderr)
    assert line.startswith(
        "error: up failed for fake-serve-0, fake-serve-1 "
        "(--keep-going went on with the others); restored the previous "
        "version of fake-serve-0 (healthy), the previous version of "
        "fake-serve-1 (healthy)"
    ), line
    assert up.stdout.count("FAILED") == 2
    assert_good_version_serves(spec, ssh_env, tmp_path)
