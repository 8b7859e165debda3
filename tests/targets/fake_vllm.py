#!/usr/bin/env python3
"""A stand-in for `vllm serve` (tests only): serves /health and /v1/models like vLLM.

Usage: vllm serve MODEL --port P [--served-model-name N] [--api-key K] [...]. A MODEL path
that does not exist fails the way vLLM does: an error line on stderr and exit status 1.

An API key (`--api-key`, else the environment variable VLLM_API_KEY, as vLLM reads them) is
enforced as vLLM's AuthenticationMiddleware does: requests under /v1, /v2 and /inference
without `Authorization: Bearer <key>` get 401; /health and /metrics stay open.

Multi-node groups behave like vLLM's native launch (vllm/entrypoints/cli/serve.py):
- a leader (`--nnodes N --node-rank 0 --master-addr A --master-port P`, or `--data-parallel-size
  D --data-parallel-size-local L --data-parallel-address A --data-parallel-rpc-port P`) binds
  the rendezvous port and serves HTTP only once every other node has joined; if a node leaves
  afterwards it exits 1, as vLLM's engine does when a worker dies;
- a `--headless` node opens no HTTP port: it connects to A:P (retrying for a while, as
  torch.distributed and ZMQ do), announces its rank, and exits 1 when the leader goes away.
  With FAKE_VLLM_FAIL_RANK=R the node of rank R runs a few seconds, then dies with an NCCL-like
  error before joining (to test that a failing worker fails the whole group).

With FAKE_VLLM_MEET=DIR:ME:OTHER a /health request is answered only while another engine's
/health request is in flight too: it creates DIR/ME and answers 200 once DIR/OTHER exists; if
the client gives up first, DIR/ME is removed again (to test that probes run concurrently,
without timing).

With FAKE_VLLM_DEAF=1 neither side notices a node going away (what the real vLLM does: its
leader runs on, or hangs in its next collective, when a headless rank dies): the group's guard
has to stop it.

With FAKE_VLLM_SICK=PATH /health answers 503 while PATH holds this process's pid (a server that
runs but stopped answering; the one started in its place answers again).

With FAKE_VLLM_ENGINE_CORE=1 it has vLLM's process shape (v1: an API server, or a `--headless`
node, with an EngineCore child process, `vllm engine-core` on its command line):
- when the EngineCore child dies (kill -9, as a CUDA error or the OOM killer ends it), the API
  server or headless node shuts down and exits 0, as vLLM 0.23.0 and 0.33.0 do (vllm#48966);
- SIGTERM stops the child and exits 0 (uvicorn's graceful shutdown);
- like vLLM's ZMQ IPC sockets (envs.VLLM_RPC_BASE_PATH, i.e. tempfile.gettempdir()) and its
  file store (`vllm_dist_<hex>`), each start leaves 7 Unix sockets and a vllm_dist_ file in the
  temporary folder (TMPDIR), which it never removes.

With FAKE_VLLM_LINGER=S a child leaves the engine's process group (its own session), keeps the
engine's output open, and outlives the engine by S seconds, then writes a last line (to test
that `down` waits for what still runs in the unit's folder, as start.sh's log writer does).
"""

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

AUTHENTICATED = ("/v1", "/v2", "/inference")
SWITCHES = {"--headless", "--enable-expert-parallel", "--enforce-eager", "--trust-remote-code"}


def parse(rest: list[str]) -> tuple[dict[str, str], set[str]]:
    opts: dict[str, str] = {}
    switches: set[str] = set()
    i = 0
    while i < len(rest):
        last = i + 1 >= len(rest) or rest[i + 1].startswith("--")
        if rest[i] in SWITCHES or last:
            switches.add(rest[i])
            i += 1
        else:
            opts[rest[i]] = rest[i + 1]
            i += 2
    return opts, switches


def group_of(opts: dict[str, str]) -> tuple[str, int, int, int] | None:
    """(address, port, rank, expected joiners) of a multi-node group; None when single."""
    nnodes = int(opts.get("--nnodes", "1"))
    if nnodes > 1:
        rank = int(opts.get("--node-rank", "0"))
        port = int(opts.get("--master-port", "29501"))
        return opts.get("--master-addr", "127.0.0.1"), port, rank, nnodes - 1
    size = int(opts.get("--data-parallel-size", "1"))
    local = int(opts.get("--data-parallel-size-local", str(size)))
    if size > local:
        start = int(opts.get("--data-parallel-start-rank", "0"))
        port = int(opts.get("--data-parallel-rpc-port", "29550"))
        address = opts.get("--data-parallel-address", "127.0.0.1")
        return address, port, start // local, size // local - 1
    return None


def engine_core() -> int:
    """The EngineCore child: runs until killed, or until its parent goes away."""
    parent = os.getppid()
    print(f"fake-vllm EngineCore pid {os.getpid()} running", flush=True)
    while os.getppid() == parent:
        time.sleep(0.5)
    return 1


def start_engine_core() -> None:
    """vLLM's shape (FAKE_VLLM_ENGINE_CORE): its temporary files, an EngineCore child; when the
    child dies this process exits 0, and SIGTERM stops the child and exits 0."""
    if not os.environ.get("FAKE_VLLM_ENGINE_CORE"):
        return
    tmp = tempfile.gettempdir()
    for _ in range(7):  # the ZMQ IPC sockets (ipc://TMPDIR/<uuid4>), left behind
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(os.path.join(tmp, str(uuid.uuid4())))
        sock.listen(1)
    open(os.path.join(tmp, f"vllm_dist_{uuid.uuid4().hex}"), "w").close()
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "engine-core"])
    stopping: list[int] = []

    def on_term(signum: int, _frame: object) -> None:
        stopping.append(signum)
        child.terminate()

    signal.signal(signal.SIGTERM, on_term)

    def watch() -> None:
        child.wait()
        if not stopping:
            print(
                "ERROR fake-vllm: Engine core proc EngineCore_DP0 died unexpectedly, "
                "shutting down client.",
                file=sys.stderr,
                flush=True,
            )
        os._exit(0)  # vLLM's launcher shuts the server down cleanly: exit status 0

    threading.Thread(target=watch, daemon=True).start()


def headless(address: str, port: int, rank: int) -> int:
    if os.environ.get("FAKE_VLLM_FAIL_RANK") == str(rank):
        print(f"fake-vllm headless node rank {rank} initializing", flush=True)
        time.sleep(3)  # alive for a while (pdctl sees it run), then fails before joining
        print(
            "RuntimeError: NCCL error: unhandled system error (fake-vllm)", file=sys.stderr,
            flush=True,
        )
        return 1
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = socket.create_connection((address, port), timeout=5)
            break
        except OSError as exc:
            if time.monotonic() > deadline:
                print(
                    f"fake-vllm: cannot reach the leader at {address}:{port}: {exc}",
                    file=sys.stderr, flush=True,
                )
                return 1
            time.sleep(0.5)
    conn.settimeout(None)
    # Said before the leader hears from this node: the leader serves (and `up` reports the group
    # healthy) only after it did, so this line is in the node's log by then.
    print(f"fake-vllm headless node rank {rank} joined {address}:{port}", flush=True)
    conn.sendall(f"rank {rank}\n".encode())
    conn.recv(1)  # blocks until the leader goes away
    print("fake-vllm: the leader went away", file=sys.stderr, flush=True)
    while os.environ.get("FAKE_VLLM_DEAF"):
        time.sleep(60)
    return 1


def lead(port: int, expected: int) -> None:
    """Wait until `expected` nodes joined on `port`; then watch them in the background."""
    server = socket.create_server(("0.0.0.0", port), reuse_port=False)
    print(f"fake-vllm leader waiting for {expected} node(s) on port {port}", flush=True)
    joined = []
    while len(joined) < expected:
        conn, peer = server.accept()
        hello = conn.recv(64).decode().strip()
        print(f"fake-vllm: {hello} joined from {peer[0]}", flush=True)
        joined.append(conn)

    def watch(conn: socket.socket) -> None:
        conn.recv(1)
        if os.environ.get("FAKE_VLLM_DEAF"):
            print("fake-vllm: a node left the group; running on", file=sys.stderr, flush=True)
            return
        print("fake-vllm: a node left the group; shutting down", file=sys.stderr, flush=True)
        os._exit(1)

    for conn in joined:
        threading.Thread(target=watch, args=(conn,), daemon=True).start()


def linger(seconds: float) -> None:
    """A child in a session of its own that ends `seconds` after this process does."""
    if os.fork() == 0:
        os.setsid()
        parent = os.getppid()
        while os.getppid() == parent:
            time.sleep(0.05)
        time.sleep(seconds)
        print("fake-vllm: the lingering child ends", flush=True)
        os._exit(0)


def main(argv: list[str]) -> int:
    if argv[:1] == ["engine-core"]:
        return engine_core()
    if len(argv) < 2 or argv[0] != "serve":
        print("usage: vllm serve MODEL [options]", file=sys.stderr)
        return 2
    model, rest = argv[1], argv[2:]
    opts, switches = parse(rest)
    group = group_of(opts)
    if "--headless" in switches:
        if group is None or group[2] == 0:
            print("ValueError: --headless needs a node rank above 0", file=sys.stderr)
            return 1
        start_engine_core()
        return headless(group[0], group[1], group[2])
    if group is not None:
        lead(group[1], group[3])
    port = int(opts.get("--port", "8000"))
    name = opts.get("--served-model-name", model)
    if model.startswith("/") and not os.path.exists(model):
        print(f"OSError: fake-vllm: model path {model} does not exist", file=sys.stderr)
        return 1
    if os.environ.get("FAKE_VLLM_LINGER"):
        linger(float(os.environ["FAKE_VLLM_LINGER"]))
    if os.environ.get("FAKE_VLLM_HANG"):  # alive but never healthy (for interrupt tests)
        print("fake-vllm: loading forever", flush=True)
        while True:
            time.sleep(60)
    start_engine_core()
    api_key = opts.get("--api-key") or os.environ.get("VLLM_API_KEY") or None
    body = json.dumps({"object": "list", "data": [{"id": name, "object": "model"}]}).encode()

    def sick() -> bool:
        path = os.environ.get("FAKE_VLLM_SICK", "")
        try:
            return bool(path) and open(path).read().strip() == str(os.getpid())
        except OSError:
            return False

    class Handler(BaseHTTPRequestHandler):
        def authorized(self) -> bool:
            path = self.path.split("?", 1)[0]
            if api_key is None or not path.startswith(AUTHENTICATED):
                return True
            return self.headers.get("Authorization", "") == f"Bearer {api_key}"

        def do_GET(self) -> None:
            if not self.authorized():
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"error": "Unauthorized"}')
            elif self.path == "/health" and os.environ.get("FAKE_VLLM_MEET"):
                self.meet(*os.environ["FAKE_VLLM_MEET"].rsplit(":", 2))
            elif self.path == "/health":
                self.send_response(503 if sick() else 200)
                self.end_headers()
            elif self.path == "/v1/models":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_response(404)
                self.end_headers()

        def meet(self, folder: str, me: str, other: str) -> None:
            mine = os.path.join(folder, me)
            open(mine, "w").close()
            while not os.path.exists(os.path.join(folder, other)):
                readable, _, _ = select.select([self.connection], [], [], 0.05)
                if readable and not self.connection.recv(1, socket.MSG_PEEK):
                    os.remove(mine)  # the client gave up: this request is no longer in flight
                    return
            self.send_response(200)
            self.end_headers()

        def log_message(self, fmt: str, *args: object) -> None:
            print("fake-vllm:", fmt % args, flush=True)

    print(f"fake-vllm serving {name} on port {port}", flush=True)
    ThreadingHTTPServer((opts.get("--host", "0.0.0.0"), port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
