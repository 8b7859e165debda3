"""Mooncake transport of the transfer agent, through the Mooncake transfer engine's Python
API (`mooncake.engine.TransferEngine`, package mooncake-transfer-engine), as vLLM's
MooncakeConnector uses it: P2P handshake (no metadata server), the spec's protocol (tcp or
rdma) and RDMA devices. The listener initializes an engine on its address, registers a buffer
and sends `ADDRESS:RPC_PORT` and the buffer's address over the side channel; the sender
initializes its own engine and writes into that buffer with transfer_sync_write.
Mooncake logs its failures (e.g. "No available RNIC") on stderr, which pdctl records."""

from __future__ import annotations

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


def _buffer(engine, size: int, fill: int):
    import numpy as np

    arr = np.full(size, fill, dtype=np.uint8)
    ret = engine.register_memory(arr.ctypes.data, size)
    if ret != 0:
        raise Failed("register", f"TransferEngine.register_memory of {size} bytes returned {ret}")
    return arr


def run(a) -> dict:
    if a.side == "listen":
        ch, peer = listen(a.bind, a.port, a.seconds + 20)
        engine = _engine(a, a.bind)
        buf = _buffer(engine, a.buffer, 0)
        session = f"{a.bind}:{engine.get_rpc_port()}"
        ch.send(session=session, addr=buf.ctypes.data, size=a.buffer)
        result = ch.recv()
        verified = int(buf[0]) == PATTERN and int(buf[-1]) == PATTERN
        return {**result, "verified": verified, "peer": peer}
    ch = connect(a.to, a.port, 20.0)
    phase("waiting for the decode side's Mooncake session")
    remote = ch.recv()
    phase("starting the Mooncake transfer engine")
    engine = _engine(a, a.bind or "0.0.0.0")
    buf = _buffer(engine, a.buffer, PATTERN)

    def post(size: int) -> None:
        ret = engine.transfer_sync_write(remote["session"], buf.ctypes.data, remote["addr"], size)
        if ret != 0:
            raise Failed("transfer", f"transfer_sync_write of {size} bytes to "
                         f"{remote['session']} returned {ret}")

    phase("writing (the engine connects to the decode side)")
    result = measure(post, a.buffer, a.bytes, a.seconds)
    post(a.buffer)
    result["backend"] = f"mooncake-{a.protocol}"
    ch.send(**result)
    return result
