"""One SSH exec per host per operation: a host whose ~/.bashrc is slow (conda or pyenv init)
pays it once for `preflight`, once for `status`, once per poll round of `up`'s health wait and
twice for `down` (read what runs; stop it all and remove the folder), not once per command or
unit. The host is a real sshd whose ~/.bashrc counts how often it is sourced
(counting_host.py); sftp and port-forwarded health probes run no shell and are not counted."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from pdctl.render.host_scripts import host_scripts
from pdctl.targets.batch import run_batch
from pdctl.targets.hosts.remote import HostOps
from pdctl.targets.ssh import Result
from tests.helpers import checked
from tests.targets.counting_host import CountingHost, start_counting_host
from tests.targets.testbed import (
    SshEnv,
    connect,
    free_port,
    host_entry,
    pdctl,
    stand_in_spec,
    write_spec,
)

KEY = "sk-one-session-test-key"


@pytest.fixture(scope="module")
def counted(ssh_env: SshEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CountingHost]:
    host = start_counting_host(ssh_env, tmp_path_factory.mktemp("counted"))
    yield host
    host.stop()


def spec_for(env: SshEnv, counted: CountingHost, venv: Path, data: Path) -> Path:
    spec = stand_in_spec(
        "counted", [host_entry(env, counted.host, data, venv=str(venv), instances=2)],
        {"replicas": 2, "port": free_port()}, secrets={"apiKey": {"env": "PDCTL_TEST_API_KEY"}},
    )
    return write_spec(data / "spec.yaml", spec)


def test_preflight_runs_one_exec_per_host(ssh_env, counted, fake_venv, tmp_path):
    spec = spec_for(ssh_env, counted, fake_venv, tmp_path)
    counted.reset()
    rec = tmp_path / "rec"
    known = ["--known-hosts", counted.known_hosts]
    proc = pdctl("preflight", str(spec), "-o", "json", *known, "--record", str(rec))
    assert proc.returncode in (0, 1), proc.stderr
    found = json.loads(proc.stdout)["findings"]
    assert not [f for f in found if f["check"] == "host.reach"], found
    # every probe ran, over SSH, and its output was recorded apart from the others'
    recorded = {p.name: p.read_text() for p in (rec / "counted").iterdir()}
    assert recorded["hostname.txt"].strip() == socket.gethostname()
    assert recorded["df-shm.txt"].startswith("Filesystem")
    assert recorded["venv.txt"].endswith("vllm: " + str(fake_venv / "bin" / "vllm") + "\n")
    assert recorded["supervise.txt"].startswith("pid1 ")  # what systemd supervision needs
    assert recorded["bundle.txt"].startswith("from ")  # what preflight --bundle compares
    assert len(recorded) == 10, sorted(recorded)  # ls /sys/class/infiniband fails: .err
    assert counted.count() == 1


def test_status_up_and_down_pay_the_shell_once_per_host(ssh_env, counted, fake_venv, tmp_path):
    spec = spec_for(ssh_env, counted, fake_venv, tmp_path)
    known = ["--known-hosts", counted.known_hosts]
    env = {"PDCTL_TEST_API_KEY": KEY}
    up = pdctl("up", str(spec), "--yes", *known, "--timeout", "60", env=env)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        counted.reset()
        status = checked(pdctl("status", str(spec), "-o", "json", *known))
        rows = json.loads(status.stdout)["instances"]
        engines = [r for r in rows if r["role"] == "serve"]
        # healthy: the owner check and the API key (read from the host's secrets file, as
        # nothing else knows it) came from the same exec
        assert [r["health"] for r in engines] == ["healthy", "healthy"], rows
        assert counted.count() == 1

        # up's health wait: one observation answers every unit of the host once
        h = counted.host
        conn = connect(ssh_env, h, counted.known_hosts)
        try:
            ops = HostOps(conn, str(tmp_path / h.name / "counted"), host_scripts())
            units = sorted(r["unit"] for r in engines)
            counted.reset()
            assert [ops.alive(u) for u in units] == [True, True]
            # up's live progress reads each starting unit's log: read with the observation
            logs = [ops.tail(units[0], 50), ops.tail(units[1], 20)]
            assert counted.count() == 1
            for unit, text in zip(units, logs, strict=True):
                port = next(r["endpoint"] for r in engines if r["unit"] == unit).split(":")[-1]
                assert f"fake-vllm serving stand-in on port {port}\n" in text, text
            assert ops.tail(units[0], 50) == logs[0]  # once: now it is read from the host
            assert counted.count() == 2
            counted.reset()
            assert ops.alive(units[0])  # asked again: a new round reads again
            assert counted.count() == 1
        finally:
            conn.close()

        counted.reset()
        logs = checked(pdctl("logs", str(spec), *known))
        for unit in units:
            assert f"==> {unit} on counted <==" in logs.stdout
        assert logs.stdout.count("fake-vllm serving stand-in") == 2, logs.stdout
        assert counted.count() == 2  # what runs; then every unit's log

        counted.reset()
        checked(pdctl("down", str(spec), *known))
        assert counted.count() == 2  # what runs; then every stop.sh and the folder removal
        assert not (tmp_path / h.name / "counted").exists()
    finally:
        pdctl("down", str(spec), *known)


def test_framing_keeps_each_commands_output_exit_and_stderr(ssh_env, counted):
    h = counted.host
    conn = connect(ssh_env, h, counted.known_hosts)
    cmds = [
        "printf 'no newline'",
        "echo out; echo err >&2; exit 3",
        'set -u; cd /; echo "$PWD"',  # a command's shell options and folder stay its own
        'echo "$PWD"; cat',  # stdin is empty (the script itself is not on stdin)
        "printf '%s begin 9\\n' fake-marker",  # looks like a marker, with another boundary
    ]
    try:
        counted.reset()
        seen: list[int] = []
        results = run_batch(conn, cmds, timeout=30, done=lambda i, _r: seen.append(i))
        assert counted.count() == 1
        assert seen == [0, 1, 2, 3, 4]
        assert all(isinstance(r, Result) for r in results)
        got = [(r.rc, r.out, r.err) for r in results]  # type: ignore[union-attr]
        home = got[3][1].strip()
        assert got == [
            (0, "no newline", ""), (3, "out\n", "err\n"), (0, "/\n", ""), (0, f"{home}\n", ""),
            (0, "fake-marker begin 9\n", ""),
        ]
        assert home != "/"
    finally:
        conn.close()


def test_a_command_past_its_timeout_is_recorded_and_the_rest_still_run(ssh_env, counted):
    h = counted.host
    conn = connect(ssh_env, h, counted.known_hosts)
    try:
        results = run_batch(conn, ["echo a", "sleep 120", "echo c"], timeout=5, step="probing")
        assert isinstance(results[0], Result) and results[0].out == "a\n"
        assert str(results[1]) == (
            f"host {h.name} ({h.address}:{h.port}): probing: no result after 5 s"
        )
        assert isinstance(results[2], Result) and results[2].out == "c\n"
    finally:
        conn.close()
