"""The test harness's one of each: the CLI runner (in this process or as a user runs it), the
wait for a condition (a port that connects, a file, a process state) and the `--known-hosts`
arguments of an SSH test bed.

The runner takes its environment injected (`env`: names to set, a name set to None is
removed), like httpie's `core.main(args, env)`: a test states what the CLI sees instead of
patching os.environ around it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")
Env = Mapping[str, "str | None"]


def environment(env: Env | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (this process's environment) with `env` applied: a None value removes a name."""
    full = dict(os.environ if base is None else base)
    for name, value in (env or {}).items():
        if value is None:
            full.pop(name, None)
        else:
            full[name] = value
    return full


def pdctl(
    *args: str,
    env: Env | None = None,
    cwd: Path | str | None = ROOT,
    timeout: float = 600,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m pdctl ARGS` in a subprocess, as a user runs it, `input` on its stdin (else
    /dev/null). The environment is this one's with COLUMNS=200 (wide enough that no line
    wraps) and then `env` applied."""
    return subprocess.run(
        [sys.executable, "-m", "pdctl", *args],
        capture_output=True,
        text=True,
        env=environment({"COLUMNS": "200", **(env or {})}),
        cwd=cwd,
        timeout=timeout,
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
    )


@contextmanager
def injected(env: Env | None) -> Iterator[None]:
    """os.environ with `env` applied for the duration; restored after."""
    if not env:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(environment(env, saved))
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_cli(
    argv: list[str], capsys: pytest.CaptureFixture[str], env: Env | None = None
) -> tuple[int, str, str]:
    """`pdctl ARGV` in this process through the real entry point, with `env` applied to the
    environment it sees: (exit code, out, err)."""
    from pdctl.cli.app import main

    old = sys.argv
    sys.argv = ["pdctl", *argv]
    try:
        with injected(env):
            main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = old
    out, err = capsys.readouterr()
    return code, out, err


def wait_until(
    ready: Callable[[], T],
    what: str,
    alive: Callable[[], object] = lambda: True,
    timeout: float = 120,
    step: float = 0.05,
    detail: Callable[[], object] = lambda: "",
) -> T:
    """Poll `ready()` until it returns something true, and return that. Fails at once when
    `alive()` turns false (what we wait on exited: it never will be ready), and after `timeout`
    seconds, which only ends a hang: no test asserts on how long it took. `detail()` (a log)
    is added to the failure."""
    deadline = time.monotonic() + timeout
    while True:
        got = ready()
        if got:
            return got
        assert alive(), f"{what}: exited before it was ready {detail()}"
        assert time.monotonic() < deadline, f"{what}: not ready after {timeout:.0f} s {detail()}"
        time.sleep(step)


def answers(url: str) -> bool:
    """Whether an HTTP GET of `url` is answered with a 2xx now."""
    import urllib.request

    try:
        urllib.request.urlopen(url, timeout=2).close()
        return True
    except OSError:
        return False


def connects(port: int, host: str = "127.0.0.1", netns: str | None = None) -> bool:
    """Whether a TCP connection to host:port succeeds now (from inside `netns` if given)."""
    if netns is not None:
        probe = f"echo > /dev/tcp/{host}/{port}"
        cmd = ["ip", "netns", "exec", netns, "bash", "-c", probe]
        return subprocess.run(cmd, capture_output=True).returncode == 0
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


def wait_port(
    port: int,
    host: str = "127.0.0.1",
    alive: Callable[[], object] = lambda: True,
    what: str | None = None,
    netns: str | None = None,
    timeout: float = 120,
    detail: Callable[[], object] = lambda: "",
) -> None:
    """Until host:port accepts a connection; fails when `alive()` turns false first."""
    label = what or f"{host}:{port}"
    wait_until(lambda: connects(port, host, netns), label, alive, timeout, 0.1, detail)


def at(error: Any) -> tuple[str, int | None, str]:
    """Where a SpecError points: (file, line, field path), its structured fields."""
    return error.file, error.line_no, error.path


def known(env: Any) -> list[str]:
    """The `--known-hosts` arguments of an SSH test bed (tests/targets/testbed.SshEnv)."""
    return ["--known-hosts", env.known_hosts]
