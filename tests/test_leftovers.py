"""The end-of-run check (tests/leftovers.py, run by tests/conftest.py) sees what a test leaves
behind: a process of the session that still runs, a network namespace it made."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests import leftovers


def started(proc: subprocess.Popen) -> subprocess.Popen:
    """`proc` once it runs its own program: Popen returns after the fork, and until the exec
    its /proc entry still shows this Python (seen once in a loaded unit run: found nothing)."""
    deadline = time.monotonic() + 10
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    while not cmdline.read_bytes().startswith(b"sleep") and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc


def test_a_process_left_running_is_found_then_stopped(tmp_path) -> None:
    older = started(subprocess.Popen(["sleep", "300"], cwd=tmp_path, start_new_session=True))
    before = leftovers.snapshot()
    left = started(subprocess.Popen(["sleep", "300"], cwd=tmp_path, start_new_session=True))
    elsewhere = started(subprocess.Popen(["sleep", "300"], cwd="/", start_new_session=True))
    try:
        found = leftovers.processes(before, [str(tmp_path)])
        # started before the snapshot, or naming none of the marks: not the session's
        assert [p.pid for p in found] == [left.pid]
        assert "sleep 300" in str(found[0]) and str(tmp_path) in str(found[0])
        leftovers.stop(found)
        assert left.wait(timeout=60) == -9
        assert leftovers.processes(before, [str(tmp_path)]) == []
    finally:
        for proc in (older, left, elsewhere):
            proc.kill()
            proc.wait()


def test_a_network_namespace_left_is_found_then_removed() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 (ip netns)")
    before = leftovers.snapshot()
    ended = subprocess.Popen(["true"])  # a pytest-xdist worker that ended: its fault hosts
    ended.wait()  # are left behind; the parent runs on (another pytest's are not ours)
    mine, gone, other = (f"pdf{p % 100000}xleft" for p in (os.getpid(), ended.pid, os.getppid()))
    for name in (mine, gone, other):
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert leftovers.namespaces(before) == sorted([mine, gone])
        leftovers.remove([mine, gone])
        assert leftovers.namespaces(before) == []
    finally:
        leftovers.remove([mine, gone, other])
