"""What `status` and `up` see of a host's units, over real SSH (tests/services.sh): a pid file
counts only while a process of that group runs in the unit's folder (the rule start.sh and
stop.sh use), so a stale pid reused by another process group reads as stopped."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pdctl.render.host_scripts import host_scripts
from pdctl.targets.hosts.remote import HostOps
from tests.targets.testbed import SshEnv, connect


def sleeper(cwd: Path) -> subprocess.Popen:
    # A new session, as start.sh's setsid: the process group id is the pid.
    return subprocess.Popen(["sleep", "300"], cwd=cwd, start_new_session=True)


def test_stale_pid_of_another_process_group_reads_as_stopped(ssh_env: SshEnv, tmp_path: Path):
    conn = connect(ssh_env)  # lo1: sshd on this machine, the same files and processes
    unit = tmp_path / "dep" / "d-serve-0"
    unit.mkdir(parents=True)
    for script in ("start.sh", "stop.sh"):
        (unit / script).write_text("true\n")
    elsewhere = sleeper(tmp_path)  # alive, but not this unit's (a pid reused after a reboot)
    own = sleeper(unit)
    try:
        ops = HostOps(conn, str(tmp_path / "dep"), host_scripts())
        (unit / "pid").write_text(f"{elsewhere.pid}\n")
        (seen,) = ops.observe()
        assert (seen.name, seen.running) == ("d-serve-0", False)
        assert not ops.alive("d-serve-0")
        (unit / "pid").write_text(f"{own.pid}\n")
        (seen,) = ops.observe()
        assert seen.running and seen.pid == str(own.pid)
        own.kill()
        own.wait()
        assert not ops.alive("d-serve-0")  # the group is gone
    finally:
        for proc in (elsewhere, own):
            proc.kill()
            proc.wait()
        conn.close()
