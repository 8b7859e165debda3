"""`up` repairs a unit whose API server died while other processes of its group live on (the
issue's scenario: `status` said running, `up` kept it and waited out its timeout): `status`
says `not answering`, `up` plans `restart` with the reason and brings it back healthy."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.helpers import checked, known, wait_until
from tests.targets.testbed import HERE, SshEnv, deployed, lo1_spec, pdctl, status_row


def test_up_restarts_a_unit_whose_server_is_gone(ssh_env: SshEnv, tmp_path: Path):
    # An engine with a helper process in its group (as vLLM's engine core beside its API
    # server): bin/vllm starts the helper, then execs the stand-in server.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    engine = venv / "bin" / "vllm"
    engine.write_text(f'#!/bin/sh\nsleep 100000 &\nexec python3 {HERE / "fake_vllm.py"} "$@"\n')
    engine.chmod(0o755)
    spec = lo1_spec(ssh_env, tmp_path, "fix", venv, host={"supervise": "none"})
    with deployed(spec, *known(ssh_env), timeout="300"):
        unit_dir = tmp_path / "lo1" / "fix" / "fix-serve-0"
        server = int((unit_dir / "pid").read_text())
        os.kill(server, signal.SIGKILL)  # the API server dies; the helper lives on

        row = status_row(spec, *known(ssh_env))
        assert row["state"].startswith("not answering (its server process is gone"), row

        again = checked(pdctl("up", str(spec), "--yes", *known(ssh_env), "--timeout", "300"))
        assert "restart: not answering, its server process" in again.stdout, again.stdout
        assert "nothing to change" not in again.stdout
        row = status_row(spec, *known(ssh_env))
        assert (row["state"], row["health"]) == ("running", "healthy"), row
        assert int(row["pid"]) != server


def test_up_restarts_a_unit_that_stopped_answering_past_its_timeout(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
):
    """A server that runs but no longer answers its health probe: within `up --timeout` it
    is still starting (kept); past it, `up` restarts it with the probe's answer and how long
    it ran. `status` (no --timeout) keeps the 900 s grace."""
    sick = tmp_path / "sick"  # /health answers 503 while this file holds the server's pid
    engine = {"device": "cpu", "env": {"FAKE_VLLM_SICK": str(sick)}}
    spec = lo1_spec(ssh_env, tmp_path, "slow", fake_venv, engine=engine)
    known_hosts = known(ssh_env)
    with deployed(spec, *known_hosts, timeout="300"):
        server = (tmp_path / "lo1" / "slow" / "slow-serve-0" / "pid").read_text().strip()
        sick.write_text(server)

        within = pdctl("up", str(spec), "--dry-run", *known_hosts, "--timeout", "300")
        assert "unchanged, running" in within.stdout, within.stdout
        # Past a 20 s --timeout (the restarted server gets those 20 s to answer again).
        wait_until(lambda: age_of(server) > 21, "the server has run 21 s", step=0.5)
        past = pdctl("up", str(spec), "--dry-run", *known_hosts, "--timeout", "20")
        assert "restart: not answering (/health answered 503) after" in past.stdout, past.stdout
        assert " s running" in past.stdout, past.stdout
        row = status_row(spec, *known_hosts)
        assert row["state"] == "running", row  # within status's 900 s grace

        checked(pdctl("up", str(spec), "--yes", *known_hosts, "--timeout", "20"))
        row = status_row(spec, *known_hosts)
        assert (row["health"], row["pid"] != server) == ("healthy", True), row


def age_of(pid: str) -> int:
    """Seconds process `pid` has run (ps etimes, as the observe script reads it)."""
    out = subprocess.run(["ps", "-o", "etimes=", "-p", pid], capture_output=True, text=True)
    return int(out.stdout.strip() or 0)


def test_up_starts_an_engine_that_exited_0_after_its_engine_core_died(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
):
    """vLLM's shape (fake_vllm FAKE_VLLM_ENGINE_CORE) under nohup: kill -9 of the EngineCore and
    the API server exits 0; `status` shows the unit stopped (never running or ok), and `up`
    starts it again."""
    engine = {"device": "cpu", "env": {"FAKE_VLLM_ENGINE_CORE": "1"}}
    spec = lo1_spec(ssh_env, tmp_path, "zero", fake_venv, engine=engine, host={"supervise": "none"})
    known_hosts = known(ssh_env)
    with deployed(spec, *known_hosts, timeout="300"):
        unit_dir = tmp_path / "lo1" / "zero" / "zero-serve-0"
        server = int((unit_dir / "pid").read_text())
        children = Path(f"/proc/{server}/task/{server}/children").read_text().split()
        core = [c for c in children if b"engine-core" in Path(f"/proc/{c}/cmdline").read_bytes()]
        assert len(core) == 1, children  # the EngineCore (the other child: the log writer)
        os.kill(int(core[0]), signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{server}").exists(), "the API server exits")
        assert "died unexpectedly" in (unit_dir / "log").read_text()

        row = status_row(spec, *known_hosts)
        assert (row["state"], row["health"]) == ("stopped", "-"), row

        checked(pdctl("up", str(spec), "--yes", *known_hosts, "--timeout", "300"))
        row = status_row(spec, *known_hosts)
        assert (row["state"], row["health"]) == ("running", "healthy"), row
        assert int(row["pid"]) != server
        # vLLM's temporary files are in the unit's own TMPDIR, emptied at each start: the 7
        # sockets and the vllm_dist_ file of this start only. (This unit folder is too deep for
        # a Unix socket path: its TMPDIR is the short folder in /tmp named after it.)
        env = Path(f"/proc/{row['pid']}/environ").read_bytes().split(b"\0")
        tmp = Path(next(e for e in env if e.startswith(b"TMPDIR=")).decode()[7:])
        left = sorted(p.name.startswith("vllm_dist_") for p in tmp.iterdir())
        assert left == [False] * 7 + [True], left
    assert not tmp.exists()
