"""`down` reports what each unit's stop.sh did: a unit whose stop.sh fails is NOT stopped
(exit 1) and keeps its folder, with the deployment folder, so that a later `down` can retry;
a unit that was not running says so instead of `stopped`.

A stop.sh that fails stands for what the review found (runtime docker, no daemon: stop.sh
exits 1 `cannot reach the docker daemon`): the test replaces one unit's stop.sh on lo1 (this
machine) with one that fails the same way, and puts the real one back for the retry."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.targets.testbed import (
    SshEnv,
    free_port,
    host_entry,
    listening,
    pdctl,
    stand_in_spec,
    write_spec,
)

NAME = "downt"
FAILING = """#!/bin/bash
echo 'stopping the container'
echo 'cannot reach the docker daemon' >&2
exit 1
"""


def deploy(env: SshEnv, venv: Path, data: Path) -> tuple[Path, int]:
    port = free_port()
    host = host_entry(env, env.host("lo1"), data, venv=str(venv), instances=2)
    spec = write_spec(
        data / "spec.yaml", stand_in_spec(NAME, [host], {"replicas": 2, "port": port})
    )
    up = pdctl("up", str(spec), "--yes", "--known-hosts", env.known_hosts, "--timeout", "60")
    assert up.returncode == 0, up.stdout + up.stderr
    return spec, port


def test_a_failing_stop_script_is_not_stopped_and_its_folder_stays(ssh_env, fake_venv, tmp_path):
    spec, port = deploy(ssh_env, fake_venv, tmp_path)
    known = ["--known-hosts", ssh_env.known_hosts]
    folder = tmp_path / "lo1" / NAME
    broken = folder / f"{NAME}-serve-1" / "stop.sh"
    real = broken.read_text()
    broken.write_text(FAILING)
    try:
        down = pdctl("down", str(spec), *known)
        out = down.stdout + down.stderr
        assert down.returncode == 1, out
        assert f"NOT stopped: {NAME}-serve-1 on lo1 (cannot reach the docker daemon)" in out
        assert f"stopped {NAME}-serve-0 on lo1" in out
        assert f"stopped {NAME}-serve-1" not in out
        assert listening(port + 1) and not listening(port)
        # the failed unit's folder (with the deployment folder) stays for the retry
        assert broken.exists()
        assert not (folder / f"{NAME}-serve-0").exists()
    finally:
        broken.write_text(real)
    retry = pdctl("down", str(spec), *known)
    assert retry.returncode == 0, retry.stdout + retry.stderr
    assert f"stopped {NAME}-serve-1 on lo1" in retry.stdout
    assert not listening(port + 1)
    assert not folder.exists()


def test_down_says_was_not_running_for_a_stopped_unit(ssh_env, fake_venv, tmp_path):
    spec, port = deploy(ssh_env, fake_venv, tmp_path)
    unit = tmp_path / "lo1" / NAME / f"{NAME}-serve-0"
    stop = subprocess.run(["bash", str(unit / "stop.sh")], capture_output=True, text=True)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert not listening(port)
    down = pdctl("down", str(spec), "--known-hosts", ssh_env.known_hosts)
    out = down.stdout + down.stderr
    assert down.returncode == 0, out
    assert f"{NAME}-serve-0 on lo1 was not running" in out
    assert f"stopped {NAME}-serve-0" not in out
    assert f"stopped {NAME}-serve-1 on lo1" in out
    assert not (tmp_path / "lo1" / NAME).exists()
    again = pdctl("down", str(spec), "--known-hosts", ssh_env.known_hosts)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"no deployment folder of '{NAME}' on lo1" in again.stdout + again.stderr
