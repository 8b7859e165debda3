"""One `up` or `down` of a deployment at a time on a host: the run lock.

`<dataDir>/<name>.lock` is held with flock(1) (util-linux) by a command on an SSH exec
channel that stays open for the whole run: `flock -n` takes it or exits LOCKED at once, the
command then reads what runs (the observe script, so taking the lock costs no extra exec),
prints a boundary line and waits on its input (`cat`). When pdctl closes the channel, exits,
crashes or loses the connection, sshd closes that input, `cat` ends and the lock goes with it:
no lock file is ever stale (an empty file stays; `down` removes it with the folder).
"""

from __future__ import annotations

import shlex
import time
from typing import Any

from pdctl.errors import PdctlError
from pdctl.targets.batch import new_boundary
from pdctl.targets.ssh import BASH, Connection

LOCKED = 75  # flock's exit status when another run holds the lock (-E)
NO_FLOCK = 127
WAIT = 60.0  # seconds for the lock and the observation


def lock_path(folder: str) -> str:
    """The lock of the deployment folder `<dataDir>/<name>`: `<dataDir>/<name>.lock`, outside
    the folder that `down` removes."""
    return folder.rstrip("/") + ".lock"


def lock_command(folder: str, mark: str, observe: str) -> str:
    """Take the lock of `folder`, then run `observe` (the observe script with its variables,
    pdctl.render.host_scripts) under it and hold the lock until the channel closes."""
    path = lock_path(folder)
    base = path.rsplit("/", 1)[0] or "/"
    held = f"( {observe} ); echo {mark} $?; exec cat"
    return (
        "umask 077\n"
        f"command -v flock >/dev/null 2>&1 || exit {NO_FLOCK}\n"
        f"mkdir -p -- {shlex.quote(base)} || exit 1\n"
        f"exec flock -n -E {LOCKED} {shlex.quote(path)} bash --norc -c {shlex.quote(held)}\n"
    )


def take(conn: Connection, folder: str, observe: str) -> tuple[Any, str]:
    """Take the run lock of `folder` on the host: the channel that holds it (close it to
    release) and the output of `observe` (lock_command), read under the lock. One PdctlError
    line when another run holds it, or flock is missing; HostLost when the connection dies."""
    import paramiko

    step = "taking the deployment lock"
    mark = new_boundary()
    chan = conn.session(step)
    try:
        chan.settimeout(1.0)
        chan.exec_command(BASH + shlex.quote(lock_command(folder, mark, observe)))
        out, err = b"", b""
        deadline = time.monotonic() + WAIT
        while not _ended(out, mark):
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(32768)
            try:
                data = chan.recv(32768)
            except TimeoutError:
                if time.monotonic() > deadline:
                    chan.close()
                    why = f"{conn.where()}: {step}: no answer after {WAIT:g} s"
                    raise PdctlError(why) from None
                continue
            if not data:
                break
            out += data
    except (paramiko.SSHException, EOFError, OSError) as exc:
        chan.close()
        raise conn.fail(step, exc) from None
    text = out.decode("utf-8", "replace")
    head, found, tail = ("\n" + text).partition(f"\n{mark} ")
    if found:
        rc = tail.strip()
        if rc != "0":
            chan.close()
            raise PdctlError(f"host {conn.host.name}: cannot read {folder}: {_last(err)}")
        return chan, head[1:]
    rc_end = chan.recv_exit_status()
    while chan.recv_stderr_ready():
        err += chan.recv_stderr(32768)
    chan.close()
    if rc_end == -1 and not conn.active():
        raise conn.fail(step, "the connection closed")
    name = conn.host.name
    if rc_end == LOCKED:
        deployment = folder.rstrip("/").rsplit("/", 1)[-1]
        raise PdctlError(
            f"host {name}: another pdctl up/down of {deployment!r} is running there "
            f"(lock {lock_path(folder)}); wait for it or stop it"
        )
    if rc_end == NO_FLOCK:
        raise PdctlError(
            f"host {name}: flock is not installed (util-linux); pdctl needs it to lock the "
            "deployment during up and down: install util-linux there"
        )
    why = _last(err) or f"exit status {rc_end}"
    raise PdctlError(f"host {name}: cannot take the lock {lock_path(folder)}: {why}")


def _ended(out: bytes, mark: str) -> bool:
    """Whether `out` holds the boundary line (the observation is complete)."""
    text = b"\n" + out
    at = text.find(f"\n{mark} ".encode())
    return at >= 0 and b"\n" in text[at + 1 :]


def _last(err: bytes) -> str:
    lines = [line for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""
