"""What `up` and `down --dry-run` print into a pipe (review of 2026-12-01), through the real
CLI in a subprocess whose stdout is a pipe and with no COLUMNS, over the real sshd host lo1:

- no line is cut at 80 columns: a logged step ("starting <unit> (serve) on lo1", rich's
  `Console.log`) was cropped there, and so was "interrupted (Ctrl-C): undoing this run
  (Ctrl-C again: do not wait for ..." (the instruction lost);
- each instance's "healthy" is printed once, not as a logged step and again as a stage line;
- `down --dry-run` with one host unreachable lists what the reachable host would lose, names
  the unreachable one with its instances, and exits 1 (it listed nothing), as `down` does.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.helpers import checked, known, pdctl
from tests.targets.testbed import SshEnv, TestHost, free_port, host_entry, lo1_spec

# Long enough that "[hh:mm:ss] starting <name>-serve-0 (serve) on lo1" passes 80 columns.
NAME = "a-deployment-whose-long-name-passes-eighty-columns"


def piped(*args: str) -> subprocess.CompletedProcess:
    """`pdctl ARGS` with stdout and stderr pipes and no COLUMNS (as in a CI log or `| tee`)."""
    return pdctl(*args, env={"COLUMNS": None, "LINES": None})


def test_piped_up_prints_every_line_whole(ssh_env: SshEnv, fake_venv: Path, tmp_path: Path) -> None:
    spec = lo1_spec(ssh_env, tmp_path, NAME, fake_venv)
    unit = f"{NAME}-serve-0"
    try:
        up = checked(piped("up", str(spec), "--yes", "--timeout", "120", *known(ssh_env)))
        lines = up.stdout.splitlines()
        # (a progress line may quote the engine log's own "pdctl: starting UNIT" too)
        starting = [line for line in lines if line.endswith(f"starting {unit} (serve) on lo1")]
        assert len(starting) == 1, up.stdout
        assert len(starting[0]) > 80  # the point of the test: a line past 80 columns
    finally:
        down = piped("down", str(spec), *known(ssh_env))
    assert down.returncode == 0, down.stdout + down.stderr


def test_piped_up_prints_healthy_once(ssh_env: SshEnv, fake_venv: Path, tmp_path: Path) -> None:
    spec = lo1_spec(ssh_env, tmp_path, "once", fake_venv)  # a short name: every line fits in 80
    try:
        up = checked(piped("up", str(spec), "--yes", "--timeout", "120", *known(ssh_env)))
        healthy = [
            line for line in up.stdout.splitlines() if "once-serve-0 on lo1: healthy" in line
        ]
        assert len(healthy) == 1, up.stdout
    finally:
        down = piped("down", str(spec), *known(ssh_env))
    assert down.returncode == 0, down.stdout + down.stderr


def test_down_dry_run_with_a_host_unreachable_lists_the_others(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
) -> None:
    port = free_port()
    one = lo1_spec(ssh_env, tmp_path, "drygone", fake_venv, port, file="one.yaml")
    # The same deployment with a second host where nothing listens for SSH (refused at once).
    data = yaml.safe_load(one.read_text())
    data["hosts"].append(host_entry(ssh_env, TestHost("gone", "127.0.0.1", free_port(1)), tmp_path))
    data["serve"]["replicas"] = 2
    two = tmp_path / "two.yaml"
    two.write_text(yaml.safe_dump(data, sort_keys=False))
    known = ["--known-hosts", ssh_env.known_hosts]
    folder = tmp_path / "lo1" / "drygone"
    try:
        checked(piped("up", str(one), "--yes", "--timeout", "120", *known))
        dry = checked(piped("down", str(two), "--dry-run", *known), 1)
        assert "would stop drygone-serve-0 (lo1)" in dry.stdout, dry.stdout
        assert f"would remove the folder {folder} on lo1" in dry.stdout, dry.stdout
        assert "cannot look on gone: drygone-serve-1 may run there (" in dry.stdout, dry.stdout
        assert "folder" not in dry.stdout.split("cannot look on gone")[1]
        error = dry.stderr.strip().splitlines()
        assert len(error) == 1, dry.stderr
        assert error[0].startswith("error: down --dry-run could not reach gone (drygone-serve-1)")
        assert folder.is_dir()  # a dry run: nothing was stopped or removed
    finally:
        down = piped("down", str(one), *known)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "stopped drygone-serve-0 on lo1" in down.stdout
