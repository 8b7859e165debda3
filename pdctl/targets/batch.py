"""Several commands in ONE SSH exec: one script, framed outputs, parsed back per command.

sshd starts the user's login shell for every exec channel, and bash then sources ~/.bashrc
(conda or pyenv init: often a second or more). A host's probes or observations therefore go
in one script: each command runs in a subshell of its own (its `exit`, `set -u` or `cd` stay
there), stdin closed, and writes its stdout and stderr between markers that carry a random
boundary chosen per run, so no output can fake a marker:

    <boundary> begin <i>\\n  ...its output...  \\n<boundary> end <i> <exit status>\\n

on stdout, and the same markers (without the status) on stderr. Whatever ~/.bashrc prints
comes before the first marker and is ignored. Results come back as each command finishes
(for progress), and a command still running after `timeout` seconds is recorded as timed out
and the batch goes on with the next command on a new channel, as separate execs would.
"""

from __future__ import annotations

import secrets
import shlex
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from pdctl.errors import PdctlError
from pdctl.targets.ssh import BASH, HostLost, Result, drain, finished, pause

if TYPE_CHECKING:
    from pdctl.targets.ssh import Connection, Result

Done = Callable[[int, "Result | PdctlError"], None]


def new_boundary() -> str:
    return "pdctl-" + secrets.token_hex(12)


def batch_script(commands: Sequence[str], boundary: str, first: int = 0) -> str:
    """The script that runs `commands` in order (numbered from `first`), framing each one."""
    lines = [f"b={boundary}", "exec </dev/null"]
    for i, cmd in enumerate(commands, start=first):
        lines += [
            f"printf '%s begin %d\\n' \"$b\" {i}", f"printf '%s begin %d\\n' \"$b\" {i} >&2",
            f"( eval {shlex.quote(cmd)} ); rc=$?", f'printf \'\\n%s end %d %d\\n\' "$b" {i} "$rc"',
            f"printf '\\n%s end %d\\n' \"$b\" {i} >&2",
        ]
    return "\n".join(lines) + "\n"


class Frames:
    """Parse one stream (stdout or stderr) of a batch script: complete sections by index."""

    def __init__(self, boundary: str, with_rc: bool) -> None:
        self.begin = boundary.encode() + b" begin "
        self.end = b"\n" + boundary.encode() + b" end "
        self.with_rc = with_rc
        self.buf = b""
        self.current: int | None = None  # the command whose output is being read
        self.done: dict[int, tuple[bytes, int]] = {}

    def feed(self, data: bytes) -> None:
        self.buf += data
        while True:
            if self.current is None:
                at = self.buf.find(self.begin)
                if at < 0:
                    # keep a tail that may be the start of a marker split across reads
                    self.buf = self.buf[-len(self.begin) :]
                    return
                nl = self.buf.find(b"\n", at)
                if nl < 0:
                    self.buf = self.buf[at:]
                    return
                self.current = int(self.buf[at + len(self.begin) : nl])
                self.buf = self.buf[nl + 1 :]
                continue
            at = self.buf.find(self.end)
            if at < 0:
                return
            nl = self.buf.find(b"\n", at + 1)
            if nl < 0:
                return
            words = self.buf[at + len(self.end) : nl].split()
            rc = int(words[1]) if self.with_rc and len(words) > 1 else 0
            self.done[self.current] = (self.buf[:at], rc)
            self.buf = self.buf[nl + 1 :]
            self.current = None

    def output(self, i: int) -> str:
        return self.done[i][0].decode("utf-8", "replace")


def run_batch(
    conn: Connection, commands: Sequence[str], timeout: float = 600.0, step: str = "",
    done: Done | None = None,
) -> list[Result | PdctlError]:
    """Run `commands` on the host in one exec channel (see the module docstring); per command
    its Result, or the PdctlError it met (a timeout; HostLost for every command left when the
    connection dies). `done(i, result)` is called as each one finishes."""
    results: list[Result | PdctlError] = []
    while len(results) < len(commands):
        first = len(results)
        for i, res in _one_channel(conn, commands, first, timeout, step):
            results.append(res)
            if done is not None:
                done(i, res)
    return results


def _one_channel(
    conn: Connection, commands: Sequence[str], first: int, timeout: float, step: str
) -> Iterator[tuple[int, Result | PdctlError]]:
    """Yield (index, result) from one channel that runs commands[first:], until they are
    all done, or one times out (the rest then runs on a new channel)."""
    import paramiko


    boundary = new_boundary()
    script = batch_script(commands[first:], boundary, first)
    out, err = Frames(boundary, with_rc=True), Frames(boundary, with_rc=False)
    try:
        chan = conn.session(step)
    except HostLost as exc:
        for i in range(first, len(commands)):
            yield i, exc
        return
    nxt = first
    started = time.monotonic()
    exited = 0.0  # when the exit status came
    try:
        chan.exec_command(BASH + shlex.quote(script))
        chan.shutdown_write()
        while nxt < len(commands):
            # a command's time counts from the end of the one before (the first one also
            # pays for the login shell, as a separate exec would)
            if time.monotonic() - started > timeout:
                chan.close()
                yield (
                    nxt,
                    PdctlError(
                        f"{conn.where()}: {step or 'a command'}: no result after {timeout:g} s"
                    ),
                )
                return
            ended, exited = finished(chan, exited)  # asked before reading: see finished()
            got = drain(chan, out.feed, err.feed)
            while nxt in out.done and nxt in err.done:
                text, rc = out.done.pop(nxt)
                yield nxt, Result(rc, text.decode("utf-8", "replace"), err.output(nxt))
                del err.done[nxt]
                nxt += 1
                started = time.monotonic()
            if got:
                continue
            if ended:
                break
            pause(chan, exited)
    except (paramiko.SSHException, EOFError, OSError) as exc:
        lost = conn.fail(step, exc)
        for i in range(nxt, len(commands)):
            yield i, lost
        return
    rc = chan.recv_exit_status()
    chan.close()
    if nxt >= len(commands):
        return
    if rc == -1 and not conn.active():  # closed without an exit status: the link died
        lost = conn.fail(step, "the connection closed")
        for i in range(nxt, len(commands)):
            yield i, lost
        return
    # the script ended before every command reported (killed): the rest did not run
    for i in range(nxt, len(commands)):
        yield i, Result(rc if rc > 0 else 255, "", f"not run: the batch script ended ({rc})")
