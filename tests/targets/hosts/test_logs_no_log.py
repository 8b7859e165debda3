"""`pdctl logs` of a unit that has no log yet (before `up`) or any more (after `down`), over
real SSH: one line naming the unit and host, exit 1; never `docker logs` on a venv host."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import checked, known
from tests.targets.testbed import (
    SshEnv,
    closed_port,
    connect,
    deployed,
    host_entry,
    lo1_spec,
    pdctl,
    stand_in_spec,
    write_spec,
)

NO_LOG = "rvw-serve-0 on lo1: no log (not started, or removed by down)"


def _spec(env: SshEnv, venv: Path, data: Path) -> Path:
    return lo1_spec(env, data, "rvw", venv, 18737)


@pytest.mark.parametrize(
    "args", [[], ["rvw-serve-0"], ["rvw-serve-0", "-f"]], ids=["every-unit", "named", "follow"]
)
def test_logs_of_a_unit_never_started_say_so_in_one_line(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path, args: list[str]
) -> None:
    spec = _spec(ssh_env, fake_venv, tmp_path)
    out = checked(pdctl("logs", str(spec), *args, "--known-hosts", ssh_env.known_hosts), 1)
    assert out.stdout == ""
    assert out.stderr.strip().splitlines() == [f"error: {NO_LOG}"]
    assert "docker" not in out.stderr.lower()


def test_logs_of_every_unit_show_the_ones_with_a_log_and_name_the_others(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
) -> None:
    """Without UNIT, one unit lacking a log (never started, removed) does not hide the logs of
    the others: each is shown under its header, the missing one says so, exit 0."""
    spec = lo1_spec(ssh_env, tmp_path, "rvw", fake_venv, 18737, host={"instances": 2}, replicas=2)
    unit = tmp_path / "lo1" / "rvw" / "rvw-serve-1"
    unit.mkdir(parents=True)
    (unit / "log").write_text("first\nsecond\n")
    out = checked(pdctl("logs", str(spec), "--known-hosts", ssh_env.known_hosts))
    assert out.stdout.splitlines() == [
        "==> rvw-serve-0 on lo1 <==", "(no log: not started, or removed by down)",
        "==> rvw-serve-1 on lo1 <==", "first", "second",
    ]
    one = pdctl("logs", str(spec), "rvw-serve-0", "--known-hosts", ssh_env.known_hosts)
    assert (one.returncode, one.stdout) == (1, ""), one
    assert "rvw-serve-0 on lo1: no log" in one.stderr


def test_an_unreachable_host_does_not_hide_the_logs_of_the_others(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
) -> None:
    """One host down: `logs` still prints what the others hold (its units read `(host
    unreachable)`), then its error line, exit 1; a unit on a reachable host reads as usual."""
    closed = closed_port()  # nothing listens there
    lo1 = host_entry(ssh_env, ssh_env.host("lo1"), tmp_path, venv=str(fake_venv), instances=1)
    gone = dict(lo1, name="gone", port=closed, dataDir=str(tmp_path / "gone"))
    spec = write_spec(
        tmp_path / "spec.yaml", stand_in_spec("rvw", [lo1, gone], {"replicas": 2, "port": 18737}),
    )
    unit = tmp_path / "lo1" / "rvw" / "rvw-serve-0"
    unit.mkdir(parents=True)
    (unit / "log").write_text("alive\n")
    known = ["--known-hosts", ssh_env.known_hosts]
    out = checked(pdctl("logs", str(spec), *known), 1)
    assert out.stdout.splitlines() == [  # by host, then unit
        "==> rvw-serve-1 on gone <==",
        "(host unreachable)",
        "==> rvw-serve-0 on lo1 <==",
        "alive",
    ]
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"error: host gone (127.0.0.1:{closed}): cannot connect"), line
    one = pdctl("logs", str(spec), "rvw-serve-0", *known)
    assert (one.returncode, one.stdout) == (0, "alive\n"), one
    other = pdctl("logs", str(spec), "rvw-serve-1", *known)
    assert (other.returncode, other.stdout) == (1, ""), other
    assert other.stderr.startswith(f"error: host gone (127.0.0.1:{closed}): cannot connect")


def test_logs_after_down_say_the_log_is_gone(ssh_env: SshEnv, fake_venv: Path, tmp_path) -> None:
    spec = _spec(ssh_env, fake_venv, tmp_path)
    with deployed(spec, *known(ssh_env)) as done:
        running = pdctl("logs", str(spec), "rvw-serve-0", *known(ssh_env))
        assert running.returncode == 0 and "fake-vllm serving" in running.stdout, running
    assert done["down"].returncode == 0, done["down"].stderr
    out = pdctl("logs", str(spec), "rvw-serve-0", *known(ssh_env))
    assert (out.returncode, out.stdout) == (1, ""), out
    assert out.stderr.strip().splitlines() == [f"error: {NO_LOG}"]


def test_a_docker_host_reads_docker_logs_only_for_a_container_it_started(
    ssh_env: SshEnv, tmp_path: Path
) -> None:
    """On a `runtime: docker` host a unit never started has no log either (not Docker's
    error); one whose folder names a container is read with `docker logs`, and a failure
    of that is one line, exit 1 (here: the host's docker CLI finds no daemon at its default
    socket; the test's dockerd listens elsewhere)."""
    engine = {"device": "cpu", "image": "vllm/vllm-openai-cpu:v0.9.0"}
    spec = lo1_spec(ssh_env, tmp_path, "rvw", None, 18737, engine, host={"runtime": "docker"})
    out = pdctl("logs", str(spec), "rvw-serve-0", *known(ssh_env))
    assert (out.returncode, out.stdout) == (1, ""), out
    assert out.stderr.strip().splitlines() == [f"error: {NO_LOG}"]
    unit = tmp_path / "lo1" / "rvw" / "rvw-serve-0"
    unit.mkdir(parents=True)
    (unit / "stop.sh").write_text("#!/bin/sh\n")
    (unit / "container-id").write_text("0123456789ab\n")
    out = pdctl("logs", str(spec), "rvw-serve-0", *known(ssh_env))
    assert (out.returncode, out.stdout) == (1, ""), out
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: rvw-serve-0 on lo1: cannot read the log: "), line


def test_a_streamed_command_reports_its_exit_status(ssh_env: SshEnv) -> None:
    """`logs -f` learns 'no log' from the exit status of the command it streams: the status
    must not be lost when it arrives just after the end of the output (it read 0 at times)."""
    conn = connect(ssh_env)
    try:
        codes = [conn.stream("exit 3", lambda _text: None) for _ in range(40)]
    finally:
        conn.close()
    assert codes == [3] * 40
