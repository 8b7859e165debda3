"""`up` piped shows plain lines of each instance's stage while it waits: over a real sshd host,
with an engine that writes vLLM's own start-up lines (tests/fixtures/vllm/) before it hands
over to the stand-in engine (fake_vllm.py)."""

from __future__ import annotations

import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.targets.test_ssh_up import free_port, known
from tests.targets.testbed import HERE, SshEnv, host_entry, pdctl, write_spec

LOADING = (
    "(EngineCore_DP0 pid=212) INFO 10-06 12:00:01 [gpu_model_runner.py:2602] "
    "Starting to load model stand-in..."
)
COMPILING = (
    "(EngineCore_DP0 pid=212) INFO 10-06 12:00:27 [monitor.py:34] "
    "torch.compile takes 15.71 s in total"
)


@pytest.fixture
def slow_venv(tmp_path: Path) -> Path:
    """bin/vllm: logs a weights-loading line, waits, a compile line, waits, then serves."""
    root = tmp_path / "venv"
    (root / "bin").mkdir(parents=True)
    shutil.copy(HERE / "fake_vllm.py", root / "bin" / "fake_vllm.py")
    script = root / "bin" / "vllm"
    script.write_text(
        "#!/bin/sh\n"
        f"echo '{LOADING}'\n"
        "sleep 8\n"
        f"echo '{COMPILING}'\n"
        "sleep 8\n"
        'exec python3 "$(dirname "$0")/fake_vllm.py" "$@"\n'
    )
    script.chmod(0o755)
    return root


def test_up_piped_prints_a_line_per_stage(ssh_env: SshEnv, slow_venv: Path, tmp_path: Path):
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "name": "fprog",
            "phase": 0,
            "model": {"name": "stand-in", "servedName": "stand-in"},
            "engine": {"device": "cpu"},
            "hosts": [host_entry(ssh_env, ssh_env.host("lo1"), tmp_path, venv=str(slow_venv))],
            "serve": {"replicas": 1, "port": free_port()},
        },
    )
    try:
        up = pdctl("up", str(spec), "--yes", *known(ssh_env), "--timeout", "90")
        assert up.returncode == 0, up.stderr
        # `[  14s/90s] fprog-serve-0 on lo1: compiling | torch.compile takes ...`
        lines = [x for x in up.stdout.splitlines() if re.match(r"\[ *\d+s/90s\] fprog-", x)]
        stages = [x.split("fprog-serve-0 on lo1: ", 1)[1] for x in lines]
        assert "loading weights | Starting to load model stand-in..." in stages, up.stdout
        assert "compiling | torch.compile takes 15.71 s in total" in stages, up.stdout
        assert stages[-1] == "healthy", up.stdout
        order = [s.split(" |")[0] for s in stages]
        assert order.index("loading weights") < order.index("compiling") < order.index("healthy")
        assert "\x1b[" not in up.stdout  # piped: no live display, no escapes
    finally:
        pdctl("down", str(spec), *known(ssh_env))


def read_all(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the other side closed (EIO)
            return out
        if not chunk:
            return out
        out += chunk


def test_up_on_a_terminal_shows_a_live_table(ssh_env: SshEnv, slow_venv: Path, tmp_path: Path):
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "name": "flive",
            "phase": 0,
            "model": {"name": "stand-in", "servedName": "stand-in"},
            "engine": {"device": "cpu"},
            "hosts": [host_entry(ssh_env, ssh_env.host("lo1"), tmp_path, venv=str(slow_venv))],
            "serve": {"replicas": 1, "port": free_port()},
        },
    )
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR")}
    env.update(TERM="xterm-256color", LINES="40", COLUMNS="160")
    master, slave = pty.openpty()
    cmd = [sys.executable, "-m", "pdctl", "up", str(spec), "--yes", *known(ssh_env)]
    try:
        proc = subprocess.Popen(
            [*cmd, "--timeout", "90"], stdin=slave, stdout=slave, stderr=slave, env=env
        )
        os.close(slave)
        raw = read_all(master).decode("utf-8", "replace")
        assert proc.wait(60) == 0, raw
        assert "\x1b[" in raw  # a terminal: the live display redraws
        shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
        header = re.search(r"instance\s+where\s+stage\s+waited\s+latest log line", shown)
        assert header, shown
        assert re.search(r"flive-serve-0\s+lo1\s+loading weights\s+\d+s/90s\s+Starting", shown)
        assert "compiling" in shown and "healthy" in shown
    finally:
        os.close(master)
        pdctl("down", str(spec), *known(ssh_env))
