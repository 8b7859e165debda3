"""A unit found stopped whose scripts changed is a start of the new version, not a restart:
nothing was running, so nothing is 'kept' or 'stopped'; and undoing it puts the previous
scripts back WITHOUT starting them (the unit was stopped before `up`: it stays stopped)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from pdctl.targets.state import Desired, Observed, diff
from tests.targets.testbed import (
    SshEnv,
    free_port,
    host_entry,
    listening,
    pdctl,
    stand_in_spec,
    write_spec,
)

NAME = "undost"


def test_diff_of_a_stopped_unit_whose_scripts_changed_is_a_start():
    from pdctl.spec.model import Host

    host = Host(name="h", address="127.0.0.1")
    wanted = [Desired(host, "u", "serve", "new", 8000)]
    change = diff(wanted, [Observed("h", "u", "old", running=False)])[0]
    assert (change.action, change.why) == ("start", "spec changed, not running")
    change = diff(wanted, [Observed("h", "u", "old", running=True)])[0]
    assert (change.action, change.why) == ("restart", "spec changed")


def spec_file(env: SshEnv, venv: Path, data: Path, port: int, file: str, **engine_env: str):
    engine: dict = {"device": "cpu"}
    if engine_env:
        engine["env"] = engine_env
    host = host_entry(env, env.host("lo1"), data, venv=str(venv))
    spec = stand_in_spec(NAME, [host], {"replicas": 1, "port": port}, engine=engine)
    return write_spec(data / file, spec)


def test_undo_of_a_stopped_unit_keeps_it_stopped_with_its_previous_scripts(
    ssh_env, fake_venv, tmp_path
):
    port = free_port()
    known = ["--known-hosts", ssh_env.known_hosts]
    first = spec_file(ssh_env, fake_venv, tmp_path, port, "su1.yaml")
    hang = spec_file(ssh_env, fake_venv, tmp_path, port, "su2.yaml", FAKE_VLLM_HANG="1")
    up = pdctl("up", str(first), "--yes", *known, "--timeout", "60")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        unit = tmp_path / "lo1" / NAME / f"{NAME}-serve-0"
        before = (unit / "start.sh").read_text()
        stop = subprocess.run(["bash", str(unit / "stop.sh")], capture_output=True, text=True)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        status = pdctl("status", str(first), "-o", "json", *known)
        rows = json.loads(status.stdout)["instances"]
        assert [r["state"] for r in rows] == ["stopped"], rows

        up = pdctl("up", str(hang), "--yes", *known, "--timeout", "5")
        out = up.stdout + up.stderr
        assert up.returncode == 1, out
        assert "spec changed, not running" in out
        assert "the running version" not in out  # nothing ran: nothing kept or stopped
        assert "(healthy)" not in out
        assert f"the previous version of {NAME}-serve-0 (not started" in out
        # as before up: stopped, with the scripts of su1.yaml
        assert not listening(port)
        assert (unit / "start.sh").read_text() == before
        status = pdctl("status", str(first), "-o", "json", *known)
        rows = json.loads(status.stdout)["instances"]
        assert [r["state"] for r in rows] == ["stopped"], rows
    finally:
        down = pdctl("down", str(first), *known)
    assert down.returncode == 0, down.stdout + down.stderr
