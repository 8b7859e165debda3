"""`pdctl up` when a host cannot be reached: one line naming the host, its address and the
cause (exit 1, no traceback); `--dry-run --offline` shows the plan without connecting."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.targets.testbed import closed_port, pdctl, write_spec


def spec_for(tmp_path: Path, port: int) -> Path:
    return write_spec(
        tmp_path / "spec.yaml",
        {
            "name": "u",
            "phase": 0,
            "model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"},
            "hosts": [
                {
                    "name": "gpu-a",
                    "address": "127.0.0.1",
                    "port": port,
                    "gpus": [0],
                    "dataDir": str(tmp_path / "data"),
                }
            ],
            "serve": {"port": 8000},
        },
    )


def test_unreachable_host_is_one_line_naming_host_address_and_cause(tmp_path: Path):
    port = closed_port()
    for extra in (["--dry-run"], ["--yes"]):
        proc = pdctl("up", str(spec_for(tmp_path, port)), *extra)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(f"error: host gpu-a (127.0.0.1:{port}): cannot connect: "), line
        assert "--dry-run --offline" in line


def test_dry_run_offline_shows_the_plan_without_connecting(tmp_path: Path):
    proc = pdctl("up", str(spec_for(tmp_path, closed_port())), "--dry-run", "--offline")
    assert proc.returncode == 0, proc.stderr
    assert "u-serve-0" in proc.stdout and "start" in proc.stdout
    assert "not contacted" in proc.stdout
    assert not (tmp_path / "data").exists()


def test_offline_without_dry_run_is_a_usage_error(tmp_path: Path):
    proc = pdctl("up", str(spec_for(tmp_path, closed_port())), "--offline")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --offline works only with --dry-run; add --dry-run"


@pytest.mark.parametrize("where", ["kubernetes", "docker"])
def test_keep_going_off_ssh_hosts_is_a_usage_error_before_connecting(tmp_path: Path, where: str):
    """--keep-going undoes only the failed instances on SSH hosts; the Docker engine target
    undoes a failed run whole and Kubernetes undoes nothing, so it is refused there at once."""
    port = closed_port()
    extra = (
        ["--phase", "1", "--target", "kubernetes"]
        if where == "kubernetes"
        else ["--docker-url", f"gpu-a=tcp://127.0.0.1:{port}"]
    )
    proc = pdctl("up", str(spec_for(tmp_path, port)), "--keep-going", "--yes", *extra)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    shown = "Kubernetes" if where == "kubernetes" else "--docker-url"
    assert line.startswith(f"error: --keep-going works on SSH hosts only: with {shown} "), line
    assert line.endswith("; leave out --keep-going"), line
