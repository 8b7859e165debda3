"""`up` repairs a unit whose API server died while other processes of its group live on (the
issue's scenario: `status` said running, `up` kept it and waited out its timeout): `status`
says `not answering`, `up` plans `restart` with the reason and brings it back healthy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from tests.helpers import checked, wait_until
from tests.targets.testbed import (
    HERE,
    SshEnv,
    free_port,
    host_entry,
    pdctl,
    stand_in_spec,
    write_spec,
)


def test_up_restarts_a_unit_whose_server_is_gone(ssh_env: SshEnv, tmp_path: Path):
    # An engine with a helper process in its group (as vLLM's engine core beside its API
    # server): bin/vllm starts the helper, then execs the stand-in server.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    engine = venv / "bin" / "vllm"
    engine.write_text(f'#!/bin/sh\nsleep 100000 &\nexec python3 {HERE / "fake_vllm.py"} "$@"\n')
    engine.chmod(0o755)
    port = free_port()
    host = host_entry(ssh_env, ssh_env.host("lo1"), tmp_path, venv=str(venv), supervise="none")
    spec = write_spec(tmp_path / "spec.yaml", stand_in_spec("fix", [host], {"port": port}))
    known = ["--known-hosts", ssh_env.known_hosts]
    try:
        checked(pdctl("up", str(spec), "--yes", *known, "--timeout", "300"))
        unit_dir = tmp_path / "lo1" / "fix" / "fix-serve-0"
        server = int((unit_dir / "pid").read_text())
        os.kill(server, signal.SIGKILL)  # the API server dies; the helper lives on

        rows = json.loads(pdctl("status", str(spec), "-o", "json", *known).stdout)["instances"]
        assert rows[0]["state"].startswith("not answering (its server process is gone"), rows

        again = checked(pdctl("up", str(spec), "--yes", *known, "--timeout", "300"))
        assert "restart: not answering, its server process" in again.stdout, again.stdout
        assert "nothing to change" not in again.stdout
        rows = json.loads(pdctl("status", str(spec), "-o", "json", *known).stdout)["instances"]
        assert (rows[0]["state"], rows[0]["health"]) == ("running", "healthy"), rows
        assert int(rows[0]["pid"]) != server
    finally:
        pdctl("down", str(spec), *known)


def test_up_restarts_a_unit_that_stopped_answering_past_its_timeout(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
):
    """A server that runs but no longer answers its health probe: within `up --timeout` it
    is still starting (kept); past it, `up` restarts it with the probe's answer and how long
    it ran. `status` (no --timeout) keeps the 900 s grace."""
    sick = tmp_path / "sick"  # /health answers 503 while this file holds the server's pid
    port = free_port()
    host = host_entry(ssh_env, ssh_env.host("lo1"), tmp_path, venv=str(fake_venv))
    engine = {"device": "cpu", "env": {"FAKE_VLLM_SICK": str(sick)}}
    spec = write_spec(
        tmp_path / "spec.yaml", stand_in_spec("slow", [host], {"port": port}, engine=engine)
    )
    known = ["--known-hosts", ssh_env.known_hosts]
    try:
        checked(pdctl("up", str(spec), "--yes", *known, "--timeout", "300"))
        server = (tmp_path / "lo1" / "slow" / "slow-serve-0" / "pid").read_text().strip()
        sick.write_text(server)

        within = pdctl("up", str(spec), "--dry-run", *known, "--timeout", "300")
        assert "unchanged, running" in within.stdout, within.stdout
        # Past a 20 s --timeout (the restarted server gets those 20 s to answer again).
        wait_until(lambda: age_of(server) > 21, "the server has run 21 s", step=0.5)
        past = pdctl("up", str(spec), "--dry-run", *known, "--timeout", "20")
        assert "restart: not answering (/health answered 503) after" in past.stdout, past.stdout
        assert " s running" in past.stdout, past.stdout
        rows = json.loads(pdctl("status", str(spec), "-o", "json", *known).stdout)["instances"]
        assert rows[0]["state"] == "running", rows  # within status's 900 s grace

        checked(pdctl("up", str(spec), "--yes", *known, "--timeout", "20"))
        rows = json.loads(pdctl("status", str(spec), "-o", "json", *known).stdout)["instances"]
        assert (rows[0]["health"], rows[0]["pid"] != server) == ("healthy", True), rows
    finally:
        pdctl("down", str(spec), *known)


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
    port = free_port()
    host = host_entry(ssh_env, ssh_env.host("lo1"), tmp_path, venv=str(fake_venv))
    host["supervise"] = "none"
    engine = {"device": "cpu", "env": {"FAKE_VLLM_ENGINE_CORE": "1"}}
    spec = write_spec(
        tmp_path / "spec.yaml", stand_in_spec("zero", [host], {"port": port}, engine=engine)
    )
    known = ["--known-hosts", ssh_env.known_hosts]
    try:
        checked(pdctl("up", str(spec), "--yes", *known, "--timeout", "300"))
        unit_dir = tmp_path / "lo1" / "zero" / "zero-serve-0"
        server = int((unit_dir / "pid").read_text())
        children = Path(f"/proc/{server}/task/{server}/children").read_text().split()
        core = [c for c in children if b"engine-core" in Path(f"/proc/{c}/cmdline").read_bytes()]
        assert len(core) == 1, children  # the EngineCore (the other child: the log writer)
        os.kill(int(core[0]), signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{server}").exists(), "the API server exits")
        assert "died unexpectedly" in (unit_dir / "log").read_text()

        rows = json.loads(pdctl("status", str(spec), "-o", "json", *known).stdout)["instances"]
        assert (rows[0]["state"], rows[0]["health"]) == ("stopped", "-"), rows

        checked(pdctl("up", str(spec), "--yes", *known, "--timeout", "300"))
        rows = json.loads(pdctl("status", str(spec), "-o", "json", *known).stdout)["instances"]
        assert (rows[0]["state"], rows[0]["health"]) == ("running", "healthy"), rows
        assert int(rows[0]["pid"]) != server
        # vLLM's temporary files are in the unit's own TMPDIR, emptied at each start: the 7
        # sockets and the vllm_dist_ file of this start only. (This unit folder is too deep for
        # a Unix socket path: its TMPDIR is the short folder in /tmp named after it.)
        env = Path(f"/proc/{rows[0]['pid']}/environ").read_bytes().split(b"\0")
        tmp = Path(next(e for e in env if e.startswith(b"TMPDIR=")).decode()[7:])
        left = sorted(p.name.startswith("vllm_dist_") for p in tmp.iterdir())
        assert left == [False] * 7 + [True], left
    finally:
        pdctl("down", str(spec), *known)
    assert not tmp.exists()
