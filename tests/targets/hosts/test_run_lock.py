"""One `up` or `down` of a deployment at a time on a host: each holds `<dataDir>/<name>.lock`
(flock, on an SSH exec channel kept open for the whole run) on every host, and a run that
finds it held refuses in one line before changing anything. The lock goes with the run:
after it ends, and after a pdctl killed with SIGKILL, the next run takes it.

The host is lo1 (this machine, over real SSH): the test holds the lock with flock(1) on the
same file, as another pdctl would, and looks at it the same way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import checked, known, wait_until
from tests.targets.testbed import SshEnv, deployed, free_port, listening, lo1_spec, pdctl

NAME = "lockt"


def spec_file(env: SshEnv, venv: Path, data: Path, port: int, file: str, **engine_env: str):
    engine = {"device": "cpu", "env": engine_env} if engine_env else None
    return lo1_spec(env, data, NAME, venv, port, engine, file)


def lock_path(data: Path) -> Path:
    return data / "lo1" / f"{NAME}.lock"


def held(path: Path) -> bool:
    """Whether someone holds the flock on `path` (flock -n fails with 1 then)."""
    if not path.exists():
        return False
    return subprocess.run(["flock", "-n", str(path), "true"]).returncode != 0


def refusal(data: Path) -> str:
    return (
        f"host lo1: another pdctl up/down of '{NAME}' is running there (lock "
        f"{lock_path(data)}); wait for it or stop it"
    )


def test_a_held_lock_refuses_up_and_down_and_a_finished_run_releases_it(
    ssh_env, fake_venv, tmp_path
):
    port = free_port()
    first = spec_file(ssh_env, fake_venv, tmp_path, port, "a.yaml")
    other = spec_file(ssh_env, fake_venv, tmp_path, port, "b.yaml", FAKE_VLLM_MARK="b")
    up = pdctl("up", str(first), "--yes", *known(ssh_env), "--timeout", "60")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        # the run closed the lock's channel; sshd ends the flock on the host after it
        wait_until(lambda: not held(lock_path(tmp_path)), "the lock released after the run")
        start = (tmp_path / "lo1" / NAME / f"{NAME}-serve-0" / "start.sh").read_text()
        holder = subprocess.Popen(
            ["flock", str(lock_path(tmp_path)), "-c", "echo held; exec sleep 300"],
            stdout=subprocess.PIPE, text=True, start_new_session=True,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            again = checked(pdctl("up", str(other), "--yes", *known(ssh_env), "--timeout", "60"), 1)
            assert refusal(tmp_path) in again.stderr.replace("\n", " "), again.stderr
            down = checked(pdctl("down", str(first), *known(ssh_env)), 1)
            assert refusal(tmp_path) in down.stderr.replace("\n", " "), down.stderr
            # nothing changed: the engine of a.yaml still runs, with its scripts
            assert listening(port)
            unit = tmp_path / "lo1" / NAME / f"{NAME}-serve-0"
            assert (unit / "start.sh").read_text() == start
        finally:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait()
        checked(pdctl("up", str(other), "--yes", *known(ssh_env), "--timeout", "60"))
        wait_until(lambda: not held(lock_path(tmp_path)), "the lock released after the run")
    finally:
        down = pdctl("down", str(first), *known(ssh_env))
    assert down.returncode == 0, down.stdout + down.stderr
    assert not listening(port)


def test_a_second_up_is_refused_while_one_runs_and_a_killed_up_releases_the_lock(
    ssh_env, fake_venv, tmp_path
):
    port = free_port()
    slow = spec_file(ssh_env, fake_venv, tmp_path, port, "slow.yaml", FAKE_VLLM_HANG="1")
    good = spec_file(ssh_env, fake_venv, tmp_path, port, "good.yaml")
    up = [sys.executable, "-m", "pdctl", "up", str(slow), "--yes", *known(ssh_env)]
    running = subprocess.Popen([*up, "--timeout", "300"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=dict(os.environ, COLUMNS="200"))
    try:
        log = tmp_path / "lo1" / NAME / f"{NAME}-serve-0" / "log"
        # until the slow engine runs (pdctl now waits for its health)
        ran = lambda: log.exists() and "loading forever" in log.read_text()  # noqa: E731
        wait_until(ran, "the slow up", lambda: running.poll() is None)
        assert held(lock_path(tmp_path))
        second = checked(pdctl("up", str(good), "--yes", *known(ssh_env), "--timeout", "60"), 1)
        assert refusal(tmp_path) in second.stderr.replace("\n", " "), second.stderr
        assert running.poll() is None
    finally:
        running.send_signal(signal.SIGKILL)
        running.wait()
    # sshd ends the killed client's session once it sees the connection closed
    wait_until(lambda: not held(lock_path(tmp_path)), "the killed run's lock")
    with deployed(good, *known(ssh_env)) as done:
        pass
    assert done["down"].returncode == 0, done["down"].stdout + done["down"].stderr


def test_up_changes_nothing_when_what_runs_changed_after_its_plan(ssh_env, fake_venv, tmp_path):
    """`up` reads what runs again under the lock: if another run changed it after the plan was
    shown (and confirmed), the plan is stale and nothing is applied."""
    from pdctl.cli.specfile import load
    from pdctl.errors import PdctlError
    from pdctl.targets.hosts.target import HostsTarget
    from pdctl.targets.ssh import SshOptions

    port = free_port()
    first = spec_file(ssh_env, fake_venv, tmp_path, port, "a.yaml")
    other = spec_file(ssh_env, fake_venv, tmp_path, port, "b.yaml", FAKE_VLLM_MARK="b")
    up = pdctl("up", str(first), "--yes", *known(ssh_env), "--timeout", "60")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        unit = tmp_path / "lo1" / NAME / f"{NAME}-serve-0"
        start = (unit / "start.sh").read_text()
        plan, bundle = load(str(other), None, None)
        with HostsTarget(plan, bundle, SshOptions(known_hosts=ssh_env.known_hosts)) as target:
            changes = target.changes()
            assert [c.action for c in changes] == ["restart"]
            # meanwhile the engine stops (another run's down, a crash): the plan is stale
            stop = subprocess.run(["bash", str(unit / "stop.sh")], capture_output=True, text=True)
            assert stop.returncode == 0, stop.stdout + stop.stderr
            with pytest.raises(PdctlError, match="changed since pdctl read it"):
                target.apply(changes, {}, timeout=60)
        assert not listening(port)
        assert (unit / "start.sh").read_text() == start
        assert not held(lock_path(tmp_path))
    finally:
        down = pdctl("down", str(first), *known(ssh_env))
    assert down.returncode == 0, down.stdout + down.stderr
