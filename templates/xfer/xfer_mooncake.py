"""Mooncake transport of the transfer agent, through the Mooncake transfer engine's Python
API (`mooncake.engine.TransferEngine`, package mooncake-transfer-engine), as vLLM's
MooncakeConnector uses it: P2P handshake (no metadata server), the spec's protocol (tcp or
rdma) and RDMA devices. The listener initializes an engine on its address, registers a buffer
and sends `ADDRESS:RPC_PORT` and the buffer's address over the side channel; the sender
initializes its own engine and writes into that buffer with transfer_sync_write.
With --device cuda (a GPU deployment) both buffers are GPU memory, as the engines register
their KV cache (MooncakeConnector `register_kv_caches`; over RDMA that needs GPUDirect,
nvidia-peermem), where the host has CUDA (torch sees a GPU); elsewhere host memory, and the
result says which (`memory`).
Mooncake logs its failures (e.g. "No available RNIC") on stderr, which pdctl records."""

from __future__ import annotations

import ctypes

from agent import Failed, connect, listen, measure, phase

PATTERN = 0xA5


def _engine(a, address: str):
    from mooncake.engine import TransferEngine

    engine = TransferEngine()
    devices = a.rdma_devices if a.protocol == "rdma" else ""
    ret = engine.initialize(address, "P2PHANDSHAKE", a.protocol, devices)
    if ret != 0:
        raise Failed("transport", f"TransferEngine.initialize({address!r}, 'P2PHANDSHAKE', "
                     f"{a.protocol!r}, {devices!r}) returned {ret}")
    return engine


def _cuda(device: str) -> bool:
    """Whether to use GPU memory: asked for, and torch sees a CUDA device here."""
    if not device.startswith("cuda"):
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _buffer(engine, size: int, fill: int, device: str = "cpu"):
    """(the buffer, its address, which memory) registered with the engine."""
    if _cuda(device):
        import torch

        t = torch.full((size,), fill, dtype=torch.uint8, device=device)
        torch.cuda.synchronize(t.device)
        buf, addr, memory = t, t.data_ptr(), f"GPU ({t.device})"
    else:
        buf = (ctypes.c_ubyte * size)()  # the standard library's: no numpy needed
        ctypes.memset(buf, fill, size)
        addr = ctypes.addressof(buf)
        memory = "host" if not device.startswith("cuda") else "host (no CUDA device here)"
    ret = engine.register_memory(addr, size)
    if ret != 0:
        raise Failed("register", f"TransferEngine.register_memory of {size} bytes of {memory} "
                     f"memory returned {ret}")
    return buf, addr, memory


def _ends(buf) -> tuple[int, int]:
    """The first and last byte of a buffer (a ctypes array or a torch tensor)."""
    return int(buf[0]), int(buf[-1])


def batch(engine, remote: dict, addr: int, size: int, n: int) -> int:
    """What prefill's MooncakeConnector does for a decode step's pull: one
    batch_transfer_sync_write of `n` descriptors (small, side by side in the buffer), then one
    of a single descriptor, since a refused batch can leave the peer refused (Mooncake's TCP
    queue per peer, MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER). At most one descriptor per byte of
    the buffer."""
    n = min(n, size)
    step = max(1, size // n)
    length = min(step, 64)
    for count in (n, 1):
        phase(f"one batch of {count} descriptors, as a decode step's pull")
        src = [addr + i * step for i in range(count)]
        dst = [remote["addr"] + i * step for i in range(count)]
        ret = engine.batch_transfer_sync_write(remote["session"], src, dst, [length] * count)
        if ret != 0:
            after = f" after one of {n} passed" if count != n else ""
            raise Failed("batch", f"batch_transfer_sync_write of {count} descriptors to "
                         f"{remote['session']} returned {ret}{after}")
    return n


def run(a) -> dict:
    if a.side == "listen":
        ch, peer = listen(a.bind, a.port, a.seconds + 20)
        engine = _engine(a, a.bind)
        buf, addr, memory = _buffer(engine, a.buffer, 0, a.device)
        session = f"{a.bind}:{engine.get_rpc_port()}"
        ch.send(session=session, addr=addr, size=a.buffer)
        result = ch.recv()
        verified = _ends(buf) == (PATTERN, PATTERN)
        return {**result, "verified": verified, "peer": peer,
                "memory": f"{result.get('memory', '?')} -> {memory}"}
    ch = connect(a.to, a.port, 20.0)
    phase("waiting for the decode side's Mooncake session")
    remote = ch.recv()
    phase("starting the Mooncake transfer engine")
    engine = _engine(a, a.bind or "0.0.0.0")
    buf, addr, memory = _buffer(engine, a.buffer, PATTERN, a.device)

    def post(size: int) -> None:
        ret = engine.transfer_sync_write(remote["session"], addr, remote["addr"], size)
        if ret != 0:
            raise Failed("transfer", f"transfer_sync_write of {size} bytes to "
                         f"{remote['session']} returned {ret}")

    phase("writing (the engine connects to the decode side)")
    result = measure(post, a.buffer, a.bytes, a.seconds)
    post(a.buffer)
    result["backend"] = f"mooncake-{a.protocol}"
    result["memory"] = memory
    if a.batch:
        try:
            result["batch"] = batch(engine, remote, addr, a.buffer, a.batch)
        except Failed:
            ch.send(**result)  # the listener ends with what was measured; the failure is ours
            raise
    ch.send(**result)
    return result
