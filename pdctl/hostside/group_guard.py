#!/usr/bin/env python3
"""pdctl's group guard: runs one node of a multi-node vLLM group and stops it when another node
of the group goes away, so that whoever restarts the node (systemd, or `pdctl up`) starts the
group again as one. A vLLM node cannot rejoin a running group, and a leader whose headless
worker died keeps running (or hangs in its next collective) instead of failing; systemd cannot
bind units on different hosts. See docs/multinode.md.

    python3 guard.py --name NODE --listen HOST:PORT [--peer NAME=HOST:PORT ...]
                     [--restart-delay SECONDS] -- COMMAND...

- It listens on HOST:PORT (the node's address for its peers) and answers each connection with
  one line, `pdctl-guard NODE TOKEN KNOWN` (TOKEN: random, new at every start). An asker first
  says `pdctl-guard ITS-NAME ITS-TOKEN`; KNOWN is the token this guard holds that asker by as a
  member of its group (`-`: none yet). An asker that says nothing within HELLO_WAIT gets the
  first three words only; the guard accepts no command.
- A peer that holds this node by another token met this node's previous start: it belongs to
  the group that is breaking up. This node never takes it for a member of its new group, and
  starts its engine only once no such peer answers (at most STALE_WAIT seconds), so that the
  engine never joins the old group's leader while that one still stops.
- It runs COMMAND as its child, in the guard's process group, and exits with its status; but
  an exit with status 0 that nobody asked for (no SIGTERM or SIGINT came) exits GONE: vLLM's
  API server and its headless nodes exit 0 when their EngineCore dies (vllm#48966), and a
  Restart=on-failure or Docker `on-failure` policy must restart that death too.
- Every POLL seconds it asks each peer's guard. A peer it has heard from since it started is
  gone when it has not answered for LOST seconds, or answers with another token (it started
  again). Then the guard closes its listener (it answers no more, so a peer restarted while
  the engine stops never takes the old token for its new group), stops COMMAND and the rest of
  its process group (SIGTERM, SIGKILL after STOP seconds) and exits GONE (75): a failure,
  which the unit's Restart=always (and a Docker `on-failure` policy) restarts. A peer it never
  heard from (a node still starting) is waited for, never acted on.
- With --restart-delay (in a container, which Docker restarts at once), a guard that runs again
  in the same container first waits that long, silent, so that its peers see it gone (what
  systemd's RestartSec does on a host).
- SIGTERM and SIGINT: the stop scripts signal the whole process group, COMMAND included; the
  guard closes its listener at once, waits for COMMAND and exits with its status.

Standard library only: it runs under the engine's own Python (`python3` of its environment).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

POLL = 1.0  # seconds between two rounds of questions
ASK_TIMEOUT = 2.0  # a peer's connect + answer
LOST = 5.0  # a peer heard from that has not answered for this long is gone
STOP = 20.0  # SIGTERM, then SIGKILL after this many seconds
GONE = 75  # exit status when a peer went away (EX_TEMPFAIL)
HELLO_WAIT = 0.5  # how long an answering guard waits for its asker's own line
STALE_WAIT = LOST + POLL + ASK_TIMEOUT + STOP + 5  # a peer of the old group noticing, stopping


USAGE = (
    "usage: guard.py --name NODE --listen HOST:PORT [--peer NAME=HOST:PORT ...] "
    "[--restart-delay SECONDS] -- CMD..."
)


def address(text: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 HOST with or without brackets) as (host, port)."""
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


class Options:
    def __init__(self) -> None:
        self.name = ""
        self.here = ("", 0)
        self.peers: list[tuple[str, str, int]] = []
        self.restart_delay = 0.0
        self.command: list[str] = []


def parse(argv: list[str]) -> Options:
    """The command line's options."""
    if "--" not in argv:
        raise SystemExit(USAGE)
    cut = argv.index("--")
    opts, command = argv[:cut], argv[cut + 1 :]
    if len(opts) % 2:
        raise SystemExit(f"guard.py: {opts[-1]} needs a value")
    out = Options()
    out.command = command
    for flag, value in zip(opts[::2], opts[1::2], strict=True):
        if flag == "--name":
            out.name = value
        elif flag == "--listen":
            out.here = address(value)
        elif flag == "--peer":
            peer, _, where = value.partition("=")
            out.peers.append((peer, *address(where)))
        elif flag == "--restart-delay":
            out.restart_delay = float(value)
        else:
            raise SystemExit(f"guard.py: unknown option {flag}")
    if not (out.name and out.here[1] and command):
        raise SystemExit(USAGE)
    return out


def wait_if_restarted(name: str, delay: float) -> None:
    """In a container Docker restarted (its /tmp kept a mark of the last start): wait `delay`
    seconds before answering, so that every peer sees this node gone."""
    mark = os.path.join(tempfile.gettempdir(), f"pdctl-guard-{name}.started")
    if os.path.exists(mark):
        print(
            f"pdctl-guard: {name} started again: waiting {delay:.0f} s so that the other "
            "nodes of its group see it gone",
            file=sys.stderr,
            flush=True,
        )
        time.sleep(delay)
    with open(mark, "w"):
        pass


def listen(here: tuple[str, int]) -> socket.socket:
    family = socket.getaddrinfo(*here, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    return socket.create_server(here, family=family)


def read_line(conn: socket.socket) -> list[str]:
    """The words of the first line `conn` sends (until its timeout): [] when none came."""
    data = b""
    try:
        while b"\n" not in data and len(data) < 256:
            chunk = conn.recv(256)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return data.decode(errors="replace").split("\n")[0].split()


def answer(
    server: socket.socket, line: str, known: dict[str, str], closed: threading.Event
) -> None:
    """Answer each asker with `line`, and with the token `known` holds it by when it said who it
    is (`known`: the Watch's tokens of the peers this node took for its group)."""
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            if closed.is_set():
                return
            try:
                conn.settimeout(HELLO_WAIT)
                asker = read_line(conn)
                held = known.get(asker[1], "-") if len(asker) == 3 else ""
                conn.sendall(f"{line} {held}".rstrip().encode() + b"\n")
            except OSError:
                pass


def close(server: socket.socket, closed: threading.Event) -> None:
    """Answer no more: before the engine stops (which may take STOP seconds), so that no peer,
    restarted meanwhile, hears this node's old token and takes it for a member of its new
    group. shutdown() wakes the answering thread's accept() (close() alone would not)."""
    if closed.is_set():
        return
    closed.set()
    try:
        server.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    server.close()


def ask(
    host: str, port: int, hello: str = "", timeout: float = ASK_TIMEOUT
) -> tuple[str, str, str] | None:
    """(name, token, the token it holds this node by) from the guard at host:port, after saying
    `hello` (`pdctl-guard NAME TOKEN`; nothing: the third is ""). None when nothing (or no guard)
    answers."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            if hello:
                conn.sendall(hello.encode() + b"\n")
            words = read_line(conn)
    except OSError:
        return None
    if len(words) in (3, 4) and words[0] == "pdctl-guard":
        return words[1], words[2], (words[3:] or [""])[0]
    return None


class Watch:
    """What this guard (`hello`: its own `pdctl-guard NAME TOKEN`) heard from each peer: the
    token it holds the peer by, when the peer last answered, and the peers of the old group."""

    def __init__(self, peers: list[tuple[str, str, int]], hello: str) -> None:
        self.peers, self.hello, self.mine = peers, hello, hello.split()[-1]
        self.token: dict[str, str] = {}
        self.heard: dict[str, float] = {}
        self.old: set[str] = set()  # peers that hold this node by another token

    def stale(self, name: str, where: str, got: tuple[str, str, str]) -> bool:
        """Whether peer `name` (not yet taken for this group) met this node's previous start."""
        if name in self.token or got[2] in ("", "-", self.mine):
            return False
        if name not in self.old:
            self.old.add(name)
            print(
                f"pdctl-guard: {where} still holds this node's previous start: a member of the "
                "old group, waited for until it stops",
                file=sys.stderr,
                flush=True,
            )
        return True

    def gone(self, now: float, answers: dict[str, tuple[str, str, str] | None]) -> str:
        """Why the group is broken ("" while it is not), given one round of answers."""
        for name, host, port in self.peers:
            got = answers.get(name)
            where = f"{name} ({host}:{port})"
            if got is not None and got[0] == name:
                if self.stale(name, where, got):
                    continue
                if name not in self.token:
                    self.token[name] = got[1]
                    print(
                        f"pdctl-guard: heard from {where}, token {got[1]}",
                        file=sys.stderr,
                        flush=True,
                    )
                elif got[1] != self.token[name]:
                    return f"{where} started again: a node cannot rejoin a running group"
                self.heard[name] = now
            elif name in self.heard and now - self.heard[name] >= LOST:
                return f"{where} has not answered for {now - self.heard[name]:.0f} s"
        return ""

    def round(self) -> dict[str, tuple[str, str, str] | None]:
        return {name: ask(host, port, self.hello) for name, host, port in self.peers}

    def old_group(self) -> list[str]:
        """The peers that answer now holding this node's previous start (asked once)."""
        answers = self.round()
        return [
            name for name, host, port in self.peers
            if (got := answers[name]) is not None and got[0] == name
            and self.stale(name, f"{name} ({host}:{port})", got)
        ]


def members() -> list[int]:
    """The other processes of this guard's process group (the engine and its workers)."""
    me, group, out = os.getpid(), os.getpgrp(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            try:
                if os.getpgid(int(entry)) == group:
                    out.append(int(entry))
            except OSError:
                continue
    return out


def stop(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the engine (every process of the group when the guard leads it, as under
    systemd or setsid), SIGKILL to what is left after STOP seconds."""
    own = os.getpgrp() == os.getpid()
    for sig, wait in ((signal.SIGTERM, STOP), (signal.SIGKILL, 5.0)):
        for pid in members() if own else [child.pid]:
            try:
                os.kill(pid, sig)
            except OSError:
                continue
        try:
            child.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGKILL or not (own and members()):
            return


def status_of(code: int) -> int:
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    opts = parse(argv)
    name, here, peers, command = opts.name, opts.here, opts.peers, opts.command
    if opts.restart_delay:
        wait_if_restarted(name, opts.restart_delay)
    token = secrets.token_hex(8)
    try:
        server = listen(here)
    except OSError as exc:
        print(
            f"pdctl-guard: {name}: cannot listen on {here[0]}:{here[1]} ({exc.strerror}): the "
            "group's nodes find each other's guards there; free the port or set guardPort",
            file=sys.stderr,
            flush=True,
        )
        return 1
    line = f"pdctl-guard {name} {token}"
    watch = Watch(peers, line)
    closed = threading.Event()
    threading.Thread(target=answer, args=(server, line, watch.token, closed), daemon=True).start()
    # The engine runs in the guard's process group: the stop scripts signal that group, so
    # a signal for the group reaches the engine itself; one for the guard alone is passed on.
    # The handlers are in place before the engine starts: a stop that comes at once still
    # ends the guard with 128+signal, not by the default action.
    stopping: list[int] = []
    started: list[subprocess.Popen] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)
        close(server, closed)
        if started and os.getpgrp() != os.getpid():
            started[0].send_signal(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    deadline = time.monotonic() + STALE_WAIT
    while not stopping and time.monotonic() < deadline and watch.old_group():
        time.sleep(POLL)  # the old group's peers stop within STALE_WAIT; then start anyway
    if stopping:  # stopped before its engine started: the engine never runs
        return 128 + stopping[0]
    child = subprocess.Popen(command)
    started.append(child)
    if stopping and os.getpgrp() != os.getpid():  # a signal for the guard alone, just now
        child.send_signal(stopping[0])
    while True:
        try:
            code = child.wait(timeout=POLL)
        except subprocess.TimeoutExpired:
            pass
        else:
            if code == 0 and not stopping:
                print(
                    f"pdctl-guard: {name}'s engine exited with status 0 though nothing asked it "
                    f"to stop (vLLM does so when its EngineCore dies): exiting {GONE} so that "
                    "it is restarted",
                    file=sys.stderr,
                    flush=True,
                )
                return GONE
            return status_of(code)
        if stopping:
            continue
        why = watch.gone(time.monotonic(), watch.round())
        if why and not stopping:
            print(
                f"pdctl-guard: {why}; stopping {name} so that its group starts again as one",
                file=sys.stderr,
                flush=True,
            )
            close(server, closed)
            stop(child)
            return GONE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
