"""`up` shows each instance's stage while it waits: plain lines when piped, a live table on a
terminal. Over a real sshd host, with an engine that writes vLLM's own start-up lines
(tests/fixtures/vllm/) and then hands over to the stand-in engine (fake_vllm.py).

No timing is assumed: the engine moves on to its next stage only when the test has seen
pdctl show the current one (it waits for a file the test creates then), so every stage is
seen however slowly the machine runs.
"""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import known
from tests.targets.testbed import HERE, SshEnv, lo1_spec, pdctl

LOADING = (
    "(EngineCore_DP0 pid=212) INFO 10-06 12:00:01 [gpu_model_runner.py:2602] "
    "Starting to load model stand-in..."
)
COMPILING = (
    "(EngineCore_DP0 pid=212) INFO 10-06 12:00:27 [monitor.py:34] "
    "torch.compile takes 15.71 s in total"
)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def slow_venv(tmp_path: Path) -> Path:
    """bin/vllm: logs a weights-loading line, waits for the file `go-compile`, logs a compile
    line, waits for `go-serve`, then serves (each wait gives up after 120 s)."""
    root = tmp_path / "venv"
    (root / "bin").mkdir(parents=True)
    shutil.copy(HERE / "fake_vllm.py", root / "bin" / "fake_vllm.py")
    script = root / "bin" / "vllm"
    wait = 'n=0; while [ ! -e "{f}" ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n+1)); done\n'
    script.write_text(
        "#!/bin/sh\n"
        f"echo '{LOADING}'\n"
        + wait.format(f=root / "go-compile")
        + f"echo '{COMPILING}'\n"
        + wait.format(f=root / "go-serve")
        + 'exec python3 "$(dirname "$0")/fake_vllm.py" "$@"\n'
    )
    script.chmod(0o755)
    return root


def follow(fd: int, proc: subprocess.Popen, steps: list[tuple[str, Callable[[], None]]]) -> str:
    """Read `fd` until the process ends; when the text read so far (escapes removed)
    matches the next step's pattern, run its action. Returns everything read."""
    raw = b""
    deadline = time.monotonic() + 300  # only against a hang; no assertion on time
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # a pty whose other side closed
                chunk = b""
            if not chunk:
                break
            raw += chunk
        shown = ANSI.sub("", raw.decode("utf-8", "replace"))
        while steps and re.search(steps[0][0], shown):
            steps.pop(0)[1]()
        if not ready and proc.poll() is not None:
            break
    return raw.decode("utf-8", "replace")


def test_up_piped_prints_a_line_per_stage(ssh_env: SshEnv, slow_venv: Path, tmp_path: Path):
    spec = lo1_spec(ssh_env, tmp_path, "fprog", slow_venv)
    cmd = [sys.executable, "-m", "pdctl", "up", str(spec), "--yes", *known(ssh_env)]
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.Popen(
        [*cmd, "--timeout", "200"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
    )
    assert proc.stdout is not None
    try:
        steps = [("loading weights", (slow_venv / "go-compile").touch),
                 ("compiling", (slow_venv / "go-serve").touch)]
        out = follow(proc.stdout.fileno(), proc, steps)
        assert proc.wait(60) == 0, out
        # `[  14s/200s] fprog-serve-0 on lo1: compiling | torch.compile takes ...`
        lines = [x for x in out.splitlines() if re.match(r"\[ *\d+s/200s\] fprog-", x)]
        stages = [x.split("fprog-serve-0 on lo1: ", 1)[1] for x in lines]
        assert "loading weights | Starting to load model stand-in..." in stages, out
        assert "compiling | torch.compile takes 15.71 s in total" in stages, out
        assert stages[-1] == "healthy", out
        order = [s.split(" |")[0] for s in stages]
        assert order.index("loading weights") < order.index("compiling") < order.index("healthy")
        assert "\x1b[" not in out  # piped: no live display, no escapes
    finally:
        proc.kill()
        pdctl("down", str(spec), *known(ssh_env))


def test_up_on_a_terminal_shows_a_live_table(ssh_env: SshEnv, slow_venv: Path, tmp_path: Path):
    spec = lo1_spec(ssh_env, tmp_path, "flive", slow_venv)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR")}
    env.update(TERM="xterm-256color", LINES="40", COLUMNS="160")
    master, slave = pty.openpty()
    cmd = [sys.executable, "-m", "pdctl", "up", str(spec), "--yes", *known(ssh_env)]
    proc = subprocess.Popen(
        [*cmd, "--timeout", "200"], stdin=slave, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    row = r"flive-serve-0\s+lo1\s+{}\s+\d+s/200s\s+"
    try:
        raw = follow(master, proc, [
            (row.format("loading weights") + "Starting", (slow_venv / "go-compile").touch),
            (row.format("compiling") + "torch.compile", (slow_venv / "go-serve").touch),
        ])
        assert proc.wait(60) == 0, raw
        assert "\x1b[" in raw  # a terminal: the live display redraws
        shown = ANSI.sub("", raw)
        assert re.search(r"instance\s+where\s+stage\s+waited\s+latest log line", shown), shown
        assert re.search(row.format("healthy"), shown), shown
    finally:
        os.close(master)
        proc.kill()
        pdctl("down", str(spec), *known(ssh_env))
