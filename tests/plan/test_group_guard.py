"""The group guard itself (pdctl/hostside/group_guard.py, shipped beside each node's scripts),
run as real processes on loopback: it runs its engine, answers its peers, and stops its engine
when a peer it heard from goes away or comes back as a new process; it never acts on a peer it
never heard from, passes its engine's exit status on, and refuses a taken port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pdctl.hostside import group_guard
from pdctl.render.supervise import RESTART_SEC
from tests.helpers import wait_until
from tests.targets.testbed import free_port

GUARD = Path(group_guard.__file__)
# How long a guard may take to act: LOST, a round of questions, the engine's stop.
ACTS_WITHIN = group_guard.LOST + group_guard.POLL + group_guard.ASK_TIMEOUT + 10
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


class Node:
    """One guard (a process-group leader, as setsid and systemd start it) and its engine."""

    def __init__(self, tmp: Path, name: str, port: int, peers: dict[str, int], cmd, delay=0):
        self.name, self.port = name, port
        self.err = tmp / f"{name}.err"
        args = [sys.executable, str(GUARD), "--name", name, "--listen", f"127.0.0.1:{port}"]
        if delay:
            args += ["--restart-delay", str(delay)]
        for peer, peer_port in peers.items():
            args += ["--peer", f"{peer}=127.0.0.1:{peer_port}"]
        with self.err.open("ab") as err:
            self.proc = subprocess.Popen([*args, "--", *cmd], stderr=err, start_new_session=True)

    def said(self) -> str:
        return self.err.read_text()

    def engine(self) -> list[int]:
        """The other processes of the guard's group (its engine)."""
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != self.proc.pid:
                try:
                    if os.getpgid(int(entry)) == self.proc.pid:
                        out.append(int(entry))
                except OSError:
                    continue
        return out

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)


@pytest.fixture
def nodes(tmp_path: Path):
    made: list[Node] = []
    (tmp_path / "log").mkdir()

    def make(name: str, port: int, peers: dict[str, int], cmd=SLEEPER, delay=0) -> Node:
        node = Node(tmp_path / "log", name, port, peers, cmd, delay)
        made.append(node)
        return node

    yield make
    for node in made:
        node.kill()


def pair(nodes) -> tuple[Node, Node]:
    pa, pb = free_port(), free_port()
    a = nodes("lead", pa, {"work": pb})
    b = nodes("work", pb, {"lead": pa})
    for me, other in ((a, "work"), (b, "lead")):
        wait_until(
            lambda me=me, other=other: f"heard from {other}" in me.said(), "contact",
            alive=lambda me=me: me.proc.poll() is None, detail=me.said,
        )
    return a, b


def test_a_node_that_dies_stops_the_other_with_a_failure(nodes) -> None:
    lead, work = pair(nodes)
    engine = lead.engine()
    assert engine, "the leader's engine runs in the guard's process group"
    work.kill()  # kill -9 of the worker's whole group (engine and guard)
    assert lead.proc.wait(timeout=ACTS_WITHIN) == 75
    assert "work (127.0.0.1:" in lead.said() and "has not answered for" in lead.said()
    assert "stopping lead so that its group starts again as one" in lead.said()
    assert not lead.engine(), "the leader's engine was stopped with it"


def test_a_node_that_came_back_as_a_new_process_stops_the_other(nodes) -> None:
    lead, work = pair(nodes)
    work.kill()
    nodes("work", work.port, {"lead": lead.port})  # back at once, before the leader noticed
    assert lead.proc.wait(timeout=ACTS_WITHIN) == 75
    assert "started again: a node cannot rejoin a running group" in lead.said()


def test_a_peer_never_heard_from_is_waited_for(nodes) -> None:
    alone = nodes("lead", free_port(), {"work": free_port()})
    wait_until(alone.engine, "the engine starts")
    time.sleep(group_guard.LOST + 3)  # longer than a heard-from peer may stay silent
    assert alone.proc.poll() is None, alone.said()
    assert alone.engine()


@pytest.mark.parametrize(
    ("code", "status"), [("raise SystemExit(3)", 3), ("import os; os.kill(os.getpid(), 9)", 137)]
)
def test_the_engine_exit_status_is_the_guard_s(nodes, code: str, status: int) -> None:
    node = nodes("lead", free_port(), {}, [sys.executable, "-c", code])
    assert node.proc.wait(timeout=20) == status


def test_an_engine_exit_0_nobody_asked_for_is_a_failure(nodes) -> None:
    """vLLM's API server and headless nodes exit 0 when their EngineCore dies (vllm#48966): the
    guard exits GONE instead, so that Restart=on-failure and Docker's on-failure restart it."""
    node = nodes("lead", free_port(), {}, [sys.executable, "-c", "pass"])
    assert node.proc.wait(timeout=20) == group_guard.GONE
    assert "exited with status 0 though nothing asked it to stop" in node.said()


def test_an_engine_exit_0_after_a_stop_signal_stays_0(nodes, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    graceful = (
        "import signal, sys, time; signal.signal(15, lambda *a: sys.exit(0)); "
        f"open({str(ready)!r}, 'w').close(); time.sleep(600)"
    )
    node = nodes("lead", free_port(), {}, [sys.executable, "-c", graceful])
    wait_until(ready.exists, "the engine handles SIGTERM")
    os.killpg(node.proc.pid, signal.SIGTERM)  # what stop.sh and halt.sh send
    assert node.proc.wait(timeout=20) == 0


def test_a_stop_signal_to_the_group_stops_the_engine_and_the_guard(nodes) -> None:
    node = nodes("lead", free_port(), {})
    wait_until(node.engine, "the engine starts")
    os.killpg(node.proc.pid, signal.SIGTERM)  # what stop.sh and halt.sh send
    assert node.proc.wait(timeout=20) == 128 + signal.SIGTERM
    assert not node.engine()


def test_a_taken_port_is_refused_before_the_engine_starts(nodes, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        node = nodes("lead", port, {}, [sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
        assert node.proc.wait(timeout=20) == 1
    assert f"cannot listen on 127.0.0.1:{port}" in node.said()
    assert not marker.exists()


def test_a_guard_stopping_its_engine_answers_no_more(nodes, tmp_path: Path) -> None:
    """The guard closes its listener before it stops its engine. Here the engine takes longer
    than LOST to stop: a peer restarted meanwhile must not hear the dying guard (it would take
    its token for the new group, see the node come back with another token, and stop itself:
    the group would bounce until the start limit)."""
    ready = tmp_path / "ready"
    slow = (
        "import signal, sys, time; "
        f"signal.signal(15, lambda *a: (time.sleep({group_guard.LOST + 5}), sys.exit(0))); "
        f"open({str(ready)!r}, 'w').close(); time.sleep(600)"
    )
    pa, pb = free_port(), free_port()
    lead = nodes("lead", pa, {"work": pb}, [sys.executable, "-c", slow])
    work = nodes("work", pb, {"lead": pa})
    for me, other in ((lead, "work"), (work, "lead")):
        wait_until(lambda me=me, other=other: f"heard from {other}" in me.said(), "contact")
    wait_until(ready.exists, "the slow engine handles SIGTERM")
    work.kill()
    wait_until(lambda: "stopping lead so that" in lead.said(), "the leader's guard acts")
    seen = len(work.said())  # the restarted node writes to the same file
    work = nodes("work", pb, {"lead": pa})  # restarted while the leader's engine still stops
    assert lead.proc.wait(timeout=ACTS_WITHIN + group_guard.LOST + 5) == group_guard.GONE
    nodes("lead", pa, {"work": pb})  # the leader restarted
    token = wait_until(lambda: group_guard.ask("127.0.0.1", pa), "the new leader answers")[1]
    wait_until(lambda: "heard from lead" in work.said()[seen:], "the worker hears the leader")
    heard = work.said()[seen:]
    assert f"token {token}" in heard, heard  # the new leader's, never the stopping one's
    assert "started again" not in heard


def test_the_guard_acts_before_systemd_restarts_the_node_it_lost() -> None:
    """A node restarted by systemd is gone for RestartSec at least: its peers must notice within
    that time, or the restarted node would meet peers of the old group."""
    assert group_guard.LOST + group_guard.POLL + group_guard.ASK_TIMEOUT < RESTART_SEC


def test_a_guard_started_again_in_its_container_waits_silent_first(
    nodes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--restart-delay (containers): a guard that finds its mark from an earlier start (Docker
    restarted the container, whose /tmp it keeps) waits before it answers its peers."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the guards' /tmp
    port = free_port()
    first = nodes("work", port, {}, [sys.executable, "-c", "pass"], delay=30)
    assert first.proc.wait(timeout=20) == group_guard.GONE
    assert "waiting" not in first.said()  # a first start does not wait
    again = nodes("work", port, {}, SLEEPER, delay=30)
    wait_until(lambda: "started again: waiting 30 s" in again.said(), "the wait")
    assert group_guard.ask("127.0.0.1", port) is None  # silent: its peers see it gone
    assert not again.engine()


class OldLeader:
    """A leader of the old group still answering (its guard slow to notice, as on a loaded
    host): it holds the asking worker by the worker's previous token."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.heard: list[str] = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(group_guard.HELLO_WAIT)
                try:
                    self.heard.append(conn.recv(256).decode())
                except OSError:
                    self.heard.append("")
                held = b" 0prev0" if self.heard[-1] else b""  # to an asker that said who it is
                conn.sendall(b"pdctl-guard lead 00old00" + held + b"\n")

    def stop(self) -> None:
        self.server.close()


def test_a_node_back_before_its_old_group_stopped_waits_for_it(nodes) -> None:
    """A node restarted while a peer of its old group still answers (the peer holds it by its
    previous token) neither takes that peer for its new group nor starts its engine; once the
    peer is gone it starts, and meets the peer's next start. (Taking the old leader for its
    group, it would stop again when that leader stops: a second restart for nothing.)"""
    old = OldLeader()
    work = nodes("work", free_port(), {"lead": old.port})
    said = wait_until(
        lambda: "still holds" in work.said() or "heard from" in work.said(), "the worker asks",
        alive=lambda: work.proc.poll() is None, detail=work.said,
    )
    assert "still holds this node's previous start" in work.said(), said
    assert old.heard[0].startswith("pdctl-guard work ")  # the worker says who it is
    time.sleep(group_guard.POLL * 3)
    assert not work.engine() and "heard from" not in work.said()
    old.stop()
    wait_until(work.engine, "the worker's engine starts once the old leader is gone")
    lead = nodes("lead", old.port, {"work": work.port})
    token = wait_until(lambda: group_guard.ask("127.0.0.1", lead.port), "the new leader")[1]
    wait_until(lambda: "heard from lead" in work.said(), "the worker meets the new leader")
    assert f"token {token}" in work.said() and "00old00" not in work.said()
    wait_until(lambda: "heard from work" in lead.said(), "the new leader meets the worker")
    held = group_guard.ask("127.0.0.1", lead.port, f"pdctl-guard work {'x' * 16}")
    assert held is not None and held[2] not in ("-", "x" * 16)  # it holds the worker's real token
