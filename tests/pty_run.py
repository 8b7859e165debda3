"""Run the real pdctl on a pseudo-terminal: what a user at a terminal sees (and types)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys


def on_a_pty(
    args: list[str], env: dict[str, str] | None = None, reply: str | None = None
) -> tuple[int, str]:
    """Run `python -m pdctl ARGS` with stdout and stderr on a pseudo-terminal: (exit code,
    what it showed). `env`: its whole environment (None: this one's). `reply`: typed, with
    Enter, when pdctl asks `[y/N]` (stdin is the terminal then; else /dev/null)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pdctl", *args],
        stdin=subprocess.DEVNULL if reply is None else follower,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    shown = b""
    answered = reply is None
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        shown += data
        if not answered and b"[y/N]" in shown:
            os.write(leader, (reply or "").encode() + b"\n")
            answered = True
    os.close(leader)
    return proc.wait(timeout=60), shown.decode("utf-8", "replace")
