"""The test harness's one of each: the CLI runner (in this process or as a user runs it), the
wait for a condition (a port that connects, a file, a process state) and the `--known-hosts`
arguments of an SSH test bed.

The runner takes its environment injected (`env`: names to set, a name set to None is
removed), like httpie's `core.main(args, env)`: a test states what the CLI sees instead of
patching os.environ around it.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path
from subprocess import DEVNULL, CompletedProcess, TimeoutExpired, run
from typing import IO, TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pdctl.plan import Plan
    from pdctl.render import Bundle

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
    *args: str, env: Env | None = None, cwd: Path | str | None = ROOT, timeout: float = 600,
    input: str | None = None, subprocess: bool = False,
) -> CompletedProcess[str]:
    """`pdctl ARGS` as a user runs it, `input` on its stdin (else an empty one). The environment
    is this one's with COLUMNS=200 (wide enough that no line wraps) and then `env` applied.

    In this process through `python -m pdctl`'s entry point (`in_process`): no interpreter and
    typer start per run. `subprocess=True` (or SUBPROCESS, PDCTL_TEST_SUBPROCESS=1 sets it)
    runs `python -m pdctl` in a child, for a test about the process itself: what `ps` shows,
    signals, its process group, the installed entry point. A call from another thread than the
    main one gets a child too: fds 0-2 are one set per process."""
    full = environment({"COLUMNS": "200", **(env or {})})
    if subprocess or SUBPROCESS or threading.current_thread() is not threading.main_thread():
        return run(
            [sys.executable, "-m", "pdctl", *args], capture_output=True, text=True, env=full,
            cwd=cwd, timeout=timeout, input=input, stdin=DEVNULL if input is None else None,
        )
    return in_process(list(args), full, Path(cwd or os.getcwd()), timeout, input or "")


def worker() -> tuple[int, int]:
    """(this pytest-xdist worker's number, the number of workers); (0, 1) without xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name.removeprefix("gw")), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def written(path: Path, text: str, encoding: str | None = None) -> Path:
    """`path`, with `text` written to it."""
    path.write_text(text, encoding=encoding)
    return path


def checked(proc: CompletedProcess[str], code: int = 0) -> CompletedProcess[str]:
    """`proc`, once its exit status is `code` (else the failure shows its stdout and stderr)."""
    assert proc.returncode == code, proc.stdout + proc.stderr
    return proc


SUBPROCESS = bool(os.environ.get("PDCTL_TEST_SUBPROCESS"))  # every pdctl() run in a child


class _TimedOut(BaseException):
    """SIGALRM's in `in_process`: not an Exception, so no `except Exception` in pdctl eats it."""


def _alarm(_signum: int, _frame: object) -> None:
    raise _TimedOut


def _status(code: object) -> int:
    """The exit status of `sys.exit(code)`, printing a non-int code as the interpreter does."""
    if code is None or isinstance(code, int):
        return (code or 0) & 0xFF
    print(code, file=sys.stderr)
    return 1


def _show(message: Any, category: Any, filename: str, lineno: int, *_: Any) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno))


def in_process(
    argv: list[str], env: dict[str, str], cwd: Path, timeout: float, input: str | None = None
) -> CompletedProcess[str]:
    """pdctl.cli.entry.main with what a process of its own would have: fds 0-2 on files (a
    child pdctl starts writes where pdctl does; `input` None: stdin as it is), `env` as
    os.environ, `cwd`, sys.argv, no logging handlers (pytest's) and Python's default warning
    filters; its exit status as returncode (an uncaught exception: its traceback and 1;
    KeyboardInterrupt: -SIGINT), and TimeoutExpired after `timeout` seconds. What it changes
    is put back after."""
    from pdctl.cli import state
    from pdctl.cli.entry import main

    files = [tempfile.TemporaryFile() for _ in range(3)]
    files[0].write((input or "").encode())  # None: sys.stdin as it is
    files[0].seek(0)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    streams, fds = (sys.stdin, sys.stdout, sys.stderr), [os.dup(fd) for fd in (0, 1, 2)]
    saved = (sys.argv, os.getcwd(), dict(os.environ), logging.root.handlers[:], state.DEBUG)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    code, timed_out = 0, False
    try:
        for fd, file in enumerate(files):
            if fd or input is not None:
                os.dup2(file.fileno(), fd)
        if input is not None:
            sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace",  # noqa: SIM115
                          buffering=1, closefd=False)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        sys.argv = [str(ROOT / "pdctl" / "__main__.py"), *argv]
        logging.root.handlers, state.DEBUG = [], False
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        with warnings.catch_warnings():
            warnings.resetwarnings()
            for kind in (DeprecationWarning, PendingDeprecationWarning, ImportWarning,
                         ResourceWarning):
                warnings.simplefilter("ignore", kind)
            warnings.showwarning = _show
            try:
                main()
            except SystemExit as exc:
                code = _status(exc.code)
            except KeyboardInterrupt:
                traceback.print_exc()
                code = -signal.SIGINT
            except _TimedOut:
                timed_out = True
            except BaseException:  # noqa: BLE001 - the interpreter's report of it, as a process
                traceback.print_exc()
                code = 1
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        for stream in {sys.stdin, sys.stdout, sys.stderr} - set(streams):
            with suppress(OSError, ValueError):
                stream.close()  # flushed; fds 0-2 stay open (closefd=False)
        for name, handler in handlers.items():
            if handler is not None:
                signal.signal(name, handler)
        for fd, old in enumerate(fds):
            os.dup2(old, fd)
            os.close(old)
        sys.stdin, sys.stdout, sys.stderr = streams
        sys.argv, cwd_was, env_was, logging.root.handlers, state.DEBUG = saved
        os.chdir(cwd_was)
        os.environ.clear()
        os.environ.update(env_was)
    files[0].close()
    out, err = (_read(file) for file in files[1:])
    if timed_out:
        raise TimeoutExpired(["pdctl", *argv], timeout, out, err)
    return CompletedProcess(["pdctl", *argv], code, out, err)


def _read(file: IO[bytes]) -> str:
    with file:
        file.seek(0)
        return file.read().decode("utf-8", "replace")


def run_cli(
    argv: list[str], capsys: object = None, env: Env | None = None
) -> tuple[int, str, str]:
    """`pdctl ARGV` in this process (`in_process`) from the current folder, with `env` applied
    to this environment and sys.stdin as it is: (exit code, out, err). The run has stdout and
    stderr of its own: `capsys` is unused."""
    proc = in_process(argv, environment(env), Path.cwd(), 600)
    return proc.returncode, proc.stdout, proc.stderr


def cli(argv: list[str], code: int = 0, env: Env | None = None) -> tuple[str, str]:
    """`run_cli(argv)` once its exit status is `code`: (out, err); else the failure shows both."""
    got, out, err = run_cli(argv, env=env)
    assert got == code, err + out
    return out, err


def wait_until(
    ready: Callable[[], T], what: str, alive: Callable[[], object] = lambda: True,
    timeout: float = 120, step: float = 0.05, detail: Callable[[], object] = lambda: "",
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
    port: int, host: str = "127.0.0.1", alive: Callable[[], object] = lambda: True,
    what: str | None = None, netns: str | None = None, timeout: float = 120,
    detail: Callable[[], object] = lambda: "",
) -> None:
    """Until host:port accepts a connection; fails when `alive()` turns false first."""
    label = what or f"{host}:{port}"
    wait_until(lambda: connects(port, host, netns), label, alive, timeout, 0.1, detail)


def data(name: str) -> Any:
    """A case table of tests/data/ (YAML)."""
    import yaml

    return yaml.safe_load((ROOT / "tests" / "data" / name).read_text())


def plan_of(spec: str | Path | dict[str, Any], name: str | None = None, **kw: Any) -> Plan:
    """make_plan (with KW) of a spec: its text, a file, or a document dumped as YAML in its key
    order. `name` is the file its errors name: the file's own name, else spec.yaml."""
    import yaml

    from pdctl.plan import make_plan
    from pdctl.spec import load_text

    if isinstance(spec, Path):
        name, spec = name or spec.name, spec.read_text()
    elif isinstance(spec, dict):
        spec = yaml.safe_dump(spec, sort_keys=False)
    return make_plan(load_text(spec, name or "spec.yaml")[0], **kw)


def bundle_of(spec: str | Path | dict[str, Any], **kw: Any) -> tuple[Plan, Bundle]:
    """plan_of(SPEC, **KW) and its rendered bundle."""
    from pdctl.render import render

    plan = plan_of(spec, **kw)
    return plan, render(plan)


def at(error: Any) -> tuple[str, int | None, str]:
    """Where a SpecError points: (file, line, field path), its structured fields."""
    return error.file, error.line_no, error.path


def known(env: Any) -> list[str]:
    """The `--known-hosts` arguments of an SSH test bed (tests/targets/testbed.SshEnv)."""
    return ["--known-hosts", env.known_hosts]
