"""pdctl's transfer agent: `pdctl preflight` uploads this folder to a prefill and a decode host
and runs it there for a few seconds, with the engine's own Python, to move real bytes between
them over the connector's transport stack. Standard library only, besides the transport's own
package (nixl, mooncake, torch).

    agent.py listen --transport T --bind ADDRESS --port PORT [--bytes N] [--seconds S]
    agent.py send   --transport T --to ADDRESS --port PORT   [--bytes N] [--seconds S]
    agent.py rank   --transport group --to LEADER --port PORT --rank R --world N --backend B

The listener (decode side) opens a plain TCP side channel on ADDRESS:PORT; the sender
(prefill side) connects to it, the two exchange what the transport needs (NIXL agent
metadata, a Mooncake session and buffer address, a torch.distributed rendezvous), then the
sender writes into the listener's memory. Every line on stdout is one JSON object:
  {"event": "start", "side", "transport", "pid", "python"}
  {"event": "listening", "address", "port"}
  {"event": "connected", "address", "port"}
  {"event": "result", "bytes", "seconds", "gbps", "latency_us", "verified", ...}
  {"event": "error", "stage", "errno", "message"}
The process ends by itself after --seconds plus a grace, whatever happens (an alarm), and
removes its own folder on start: nothing is left behind when pdctl is interrupted.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import signal
import socket
import struct
import sys
import time

GRACE_S = 30.0  # start-up (imports, agent creation) and the rendezvous, beyond --seconds
CONNECT_S = 20.0  # how long the sender retries a refused connection (listener starting)
SMALL = 4096  # bytes of one latency probe
PINGS = 20


def emit(event: str, **fields: object) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}, sort_keys=True) + "\n")
    sys.stdout.flush()


PHASE = [""]


def phase(name: str) -> None:
    """Say what the agent does next: a hang (a blocked connection) is then named by it."""
    PHASE[0] = name
    emit("phase", name=name)


class Failed(Exception):
    """A failure at `stage` (import, bind, connect, register, metadata, transfer, timeout)."""

    def __init__(self, stage: str, message: str, code: str = "") -> None:
        super().__init__(message)
        self.stage, self.code = stage, code


def os_failure(stage: str, exc: OSError) -> Failed:
    code = errno.errorcode.get(exc.errno or 0, "")
    if isinstance(exc, socket.timeout) or (not code and "timed out" in str(exc)):
        code = "ETIMEDOUT"
    return Failed(stage, exc.strerror or str(exc) or code, code)


class Channel:
    """Length-prefixed JSON messages over one TCP connection (the side channel)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def send(self, **msg: object) -> None:
        data = json.dumps(msg).encode()
        self.sock.sendall(struct.pack("!I", len(data)) + data)

    def recv(self) -> dict:
        size = struct.unpack("!I", self.exact(4))[0]
        return json.loads(self.exact(size))

    def exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise Failed("metadata", "the other side closed the side channel", "EPIPE")
            out += chunk
        return bytes(out)


def listen(address: str, port: int, wait: float) -> tuple[Channel, str]:
    """Accept the sender's side-channel connection; (channel, the sender's address)."""
    srv = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind((address, port))
        srv.listen(1)
    except OSError as exc:
        raise os_failure("bind", exc) from None
    emit("listening", address=address, port=port)
    srv.settimeout(wait)
    try:
        conn, peer = srv.accept()
    except OSError as exc:
        raise Failed("accept", f"no sender connected within {wait:g} s", "ETIMEDOUT") from exc
    srv.close()
    conn.settimeout(None)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return Channel(conn), peer[0]


def connect(address: str, port: int, wait: float) -> Channel:
    """Connect to the listener, retrying while it is refused (the listener still starting)."""
    end = time.monotonic() + wait
    while True:
        try:
            sock = socket.create_connection((address, port), timeout=10)
            break
        except OSError as exc:
            failure = os_failure("connect", exc)
            if failure.code != "ECONNREFUSED" or time.monotonic() > end:
                raise failure from None
            time.sleep(0.2)
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    emit("connected", address=address, port=port)
    return Channel(sock)


def measure(post, nbytes: int, total: int, seconds: float) -> dict:
    """Time `post(size)` (one blocking transfer of `size` bytes): after one to connect, the
    median of PINGS small ones (latency), then whole buffers until `total` bytes or
    `seconds` have passed."""
    lat = []
    post(min(SMALL, nbytes))  # warm-up: the transport's first connection is not latency
    for _ in range(PINGS):
        t0 = time.perf_counter()
        post(min(SMALL, nbytes))
        lat.append(time.perf_counter() - t0)
    moved, t0 = 0, time.perf_counter()
    end = t0 + seconds
    while moved < total:
        size = min(nbytes, total - moved)
        post(size)
        moved += size
        if time.perf_counter() > end:
            break
    took = max(time.perf_counter() - t0, 1e-9)
    return {
        "bytes": moved,
        "seconds": round(took, 6),
        "gbps": round(moved / took / 1e9, 6),
        "latency_us": round(sorted(lat)[len(lat) // 2] * 1e6, 1),
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("side", choices=("listen", "send", "rank"))
    p.add_argument("--transport", choices=("tcp", "nixl", "mooncake", "nccl", "group"),
                   required=True)
    p.add_argument("--bind", default="")
    p.add_argument("--to", default="")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bytes", type=int, default=256 << 20)
    p.add_argument("--buffer", type=int, default=64 << 20)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--device", default="cpu")  # cpu, or cuda: GPU memory (nixl, nccl, mooncake)
    p.add_argument("--protocol", default="tcp")  # mooncake: tcp or rdma
    p.add_argument("--rdma-devices", default="")  # mooncake: device_name
    p.add_argument("--batch", type=int, default=0)  # mooncake: one batch of N descriptors
    p.add_argument("--rank", type=int, default=0)  # group: this node's rank, 0 the leader
    p.add_argument("--world", type=int, default=2)  # group: its number of nodes
    p.add_argument("--backend", default="gloo")  # group: gloo (CPU) or nccl
    p.add_argument("--keep", action="store_true")  # leave the folder (debugging)
    a = p.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    # The transports import this file as `agent`: let that be this very module (run as
    # __main__), so that their Failed is the one caught below.
    sys.modules.setdefault("agent", sys.modules[__name__])
    # The transport's module imports its package (nixl, mooncake, torch) only when it runs.
    module = __import__("xfer_" + a.transport)
    if not a.keep:
        shutil.rmtree(here, ignore_errors=True)  # the code is loaded: nothing stays behind
        os.chdir("/")  # not a deleted folder (oneMKL, loaded by torch, fails in one)
    life = a.seconds + GRACE_S + CONNECT_S
    def give_up(*_: object) -> None:
        where = f" while {PHASE[0]}" if PHASE[0] else ""
        emit("error", stage="timeout", errno="ETIMEDOUT", message=f"gave up after {life:g} s"
             + where)
        os._exit(3)

    signal.signal(signal.SIGALRM, give_up)
    signal.alarm(int(life) + 1)
    emit("start", side=a.side, transport=a.transport, pid=os.getpid(), pgid=os.getpgid(0),
         python=sys.executable)
    a.buffer = max(SMALL, min(a.buffer, a.bytes))
    try:
        result = module.run(a)
    except Failed as exc:
        emit("error", stage=exc.stage, errno=exc.code, message=str(exc)[:2000])
        return 1
    except ImportError as exc:
        emit("error", stage="import", errno="", message=f"{exc} (python {sys.executable})")
        return 1
    except Exception as exc:  # the transport's own errors (RuntimeError, nixlBind errors)
        emit("error", stage="transport", errno="", message=f"{type(exc).__name__}: {exc}"[:2000])
        return 1
    emit("result", side=a.side, **result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
