"""Mooncake's TCP transport and one large batch to one peer (docs/phase2-bare-metal.md,
"Why the burst stalled: Mooncake's TCP queue per peer"): what prefill's MooncakeConnector
does for a decode step's pull, with the real mooncake-transfer-engine and no GPU.

    python benchmarks/mooncake_tcp_batch.py [SPEC]

Two transfer engines on 127.0.0.1 (P2P handshake, protocol tcp, host memory), each in its own
process: a receiver registers a buffer, a sender writes N descriptors of 8 KiB (smaller past
25,000) into it with one `batch_transfer_sync_write`, as the connector does, then more batches
after it (Mooncake's queue counts descriptors, whatever their size). Run twice:
with Mooncake's defaults, and with the environment pdctl's plan gives SPEC's prefill
(default examples/phase2-mooncake-tcp.yaml). Needs a Python where `mooncake.engine` imports
(mooncake-transfer-engine-non-cuda, pdctl's test extra, on Linux with libibverbs1 and
libnuma1); connects to nothing but loopback.

Measured with 0.3.13.post1 (the version pdctl installs): with the defaults a batch of 3,000
descriptors is refused at once ("TCP lane queue-full rejection count"), and later batches to
that peer usually fail too, even one of one slice (14 of 15 runs on a 2-core machine; in the
others the queue drained within 2 s); with pdctl's environment (queue and pending admissions
at 65535, the admission timeout at the KV hold) every batch passes, 131,070 descriptors too
(pdctl/plan/mooncake_tcp.py has the figures of each setting alone)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SLICE = 8192  # bytes per descriptor: one KV block's region of a small model
# The sequence: small, at the default's edge, over it, then small ones (does a refusal stay?),
# a pause, one far over the default, and one as large as pdctl's settings hold.
STEPS = ("100", "2048", "3000", "1", "100", "sleep:5", "1", "25000", "131070")
MOST = 25000


def _engine():
    from mooncake.engine import TransferEngine

    engine = TransferEngine()
    if engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
        raise SystemExit("TransferEngine.initialize failed")
    return engine


def _buffer(engine, size: int, fill: int):
    import numpy as np

    buf = np.full(size, fill, dtype=np.uint8)
    if engine.register_memory(buf.ctypes.data, size) != 0:
        raise SystemExit("register_memory failed")
    return buf


def receive(seconds: float) -> None:
    """The decode side: a registered buffer, its session and address on stdout."""
    engine = _engine()
    buf = _buffer(engine, MOST * SLICE, 0)
    print(json.dumps({"session": f"127.0.0.1:{engine.get_rpc_port()}",
                      "addr": buf.ctypes.data}), flush=True)
    time.sleep(seconds)


def write(engine, session: str, src: int, dst: int, n: int, size: int) -> dict:
    """One batch_transfer_sync_write of `n` descriptors of `size` bytes, as the connector's."""
    t0 = time.monotonic()
    ret = engine.batch_transfer_sync_write(
        session, [src + i * size for i in range(n)], [dst + i * size for i in range(n)],
        [size] * n)
    return {"descriptors": n, "ret": ret, "s": round(time.monotonic() - t0, 3)}


def send(session: str, addr: int, steps: list[str]) -> None:
    """The prefill side: each step one batch of N descriptors, `sleep:S`, or `par:N1,N2,...`:
    batches written at once from threads of their own, as the connector's sender threads
    (`num_workers`, 10 by default) write the pulls of several decode steps; a JSON line each."""
    engine = _engine()
    buf = _buffer(engine, MOST * SLICE, 0xA5)
    for step in steps:
        if step.startswith("sleep:"):
            time.sleep(float(step[6:]))
            continue
        sizes = [int(n) for n in step.removeprefix("par:").split(",")]
        size = min(SLICE, MOST * SLICE // sum(sizes))  # past MOST descriptors, smaller ones
        offsets = [sum(sizes[:k]) * size for k in range(len(sizes))]
        with ThreadPoolExecutor(len(sizes)) as pool:
            rows = list(pool.map(lambda o, n, s=size: write(
                engine, session, buf.ctypes.data + o, addr + o, n, s), offsets, sizes))
        for row in rows:
            print(json.dumps(row), flush=True)


def run(env: dict[str, str], steps: tuple[str, ...] = STEPS,
        python: str = sys.executable) -> tuple[list[dict], str]:
    """One receiver and one sender with `env` over Mooncake's own (no MC_ variable of this
    process's passes): each batch's result, and the sender's log."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MC_")} | env
    me = str(Path(__file__).resolve())
    with subprocess.Popen([python, me, "receive", "120"], env=base, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True) as rx:
        try:
            assert rx.stdout is not None
            peer = json.loads(rx.stdout.readline())
            tx = subprocess.run([python, me, "send", peer["session"], str(peer["addr"]),
                                 *steps], env=base, capture_output=True, text=True,
                                timeout=120, check=False)
        finally:
            rx.kill()
    results = [json.loads(line) for line in tx.stdout.splitlines() if line.startswith("{")]
    return results, tx.stderr


def pdctl_env(spec_path: Path) -> dict[str, str]:
    """The MC_ variables pdctl's plan gives the spec's first prefill engine."""
    from pdctl.plan import make_plan
    from pdctl.spec import load_text

    spec, _ = load_text(spec_path.read_text(), spec_path.name)
    prefill = next(i for i in make_plan(spec).instances if i.role == "prefill")
    return {k: v for k, v in prefill.env if k.startswith("MC_")}


def main(argv: list[str]) -> int:
    spec = Path(argv[0] if argv else "examples/phase2-mooncake-tcp.yaml")
    for label, env in (("Mooncake's defaults", {}), (f"pdctl's plan of {spec}", pdctl_env(spec))):
        results, log = run(env)
        print(f"{label}: {' '.join(f'{k}={v}' for k, v in env.items()) or '(no MC_TCP_ variable)'}")
        for r in results:
            print(f"  batch of {r['descriptors']:>6} descriptors: "
                  f"{'ok' if r['ret'] == 0 else 'FAILED'}"
                  f" (ret {r['ret']}, {r['s']} s)")
        refused = [ln for ln in log.splitlines() if "queue-full" in ln]
        print(f"  Mooncake's log: {len(refused)} 'TCP lane queue-full' lines")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "receive":
        receive(float(sys.argv[2]))
    elif len(sys.argv) > 1 and sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    else:
        sys.exit(main(sys.argv[1:]))
