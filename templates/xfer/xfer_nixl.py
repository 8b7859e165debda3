"""NIXL transport of the transfer agent, through the nixl Python API (nixl 1.5:
nixl._api.nixl_agent) with the UCX backend, as vLLM's NixlConnector uses it: each side
creates an agent and registers a buffer (host memory, or GPU memory with --device cuda);
the listener sends its agent metadata and buffer address over the side channel; the sender
adds the remote agent and WRITEs into the listener's buffer (initialize_xfer + transfer,
polled with check_xfer_state). UCX reads UCX_TLS / UCX_NET_DEVICES from the environment."""

from __future__ import annotations

import base64
import select
import time

from agent import Failed, connect, listen, measure, phase

PATTERN = 0xA5
DONE = b"pdctl-preflight-done"


def _buffer(size: int, device: str, fill: int):
    """(object keeping the memory alive, address, NIXL memory type, device id)."""
    if device.startswith("cuda"):
        import torch

        t = torch.full((size,), fill, dtype=torch.uint8, device=device)
        return t, t.data_ptr(), "VRAM", t.get_device()
    import numpy as np

    arr = np.full(size, fill, dtype=np.uint8)
    return arr, arr.ctypes.data, "DRAM", 0


def _agent(name: str):
    from nixl._api import nixl_agent, nixl_agent_config

    agent = nixl_agent(name, nixl_agent_config(backends=["UCX"]))
    if "UCX" not in agent.backends:
        raise Failed("transport", f"NIXL has no UCX backend (plugins: {agent.plugin_list})")
    return agent


def _register(agent, addr: int, size: int, mem: str, dev: int) -> None:
    try:
        agent.register_memory([(addr, size, dev, "")], mem)
    except Exception as exc:  # nixlBind errors: e.g. locked memory (ulimit -l) too small
        raise Failed("register", f"{type(exc).__name__}: {exc}") from None


def _done(agent) -> bool:
    notes = agent.get_new_notifs()
    return any(DONE in m for msgs in notes.values() for m in msgs)


def _first(buf) -> tuple[int, int]:
    if hasattr(buf, "cpu"):
        return int(buf[0].item()), int(buf[-1].item())
    return int(buf[0]), int(buf[-1])


def run(a) -> dict:
    if a.side == "listen":
        ch, peer = listen(a.bind, a.port, a.seconds + 20)
        phase("creating the NIXL agent (UCX backend)")
        agent = _agent(f"pdctl-decode-{a.port}")
        phase("registering the buffer")
        buf, addr, mem, dev = _buffer(a.buffer, a.device, 0)
        _register(agent, addr, a.buffer, mem, dev)
        phase("sending the NIXL metadata")
        meta = base64.b64encode(agent.get_agent_metadata()).decode()
        ch.send(meta=meta, addr=addr, size=a.buffer, mem=mem, dev=dev, name=agent.name)
        # Progress the agent (as an engine's loop does) until the sender's figures come:
        # over TCP, UCX emulates the remote write with messages the target must handle.
        phase("receiving the writes")
        notified = False
        while not select.select([ch.sock], [], [], 0.0005)[0]:
            notified = notified or _done(agent)
        result = ch.recv()  # the sender's figures, once its last WRITE completed
        end = time.monotonic() + 10
        while not notified and time.monotonic() < end:
            notified = _done(agent)
            if not notified:
                time.sleep(0.01)
        head, tail = _first(buf)
        verified = notified and head == PATTERN and tail == PATTERN
        return {**result, "verified": verified, "notified": notified, "peer": peer}
    ch = connect(a.to, a.port, 20.0)
    agent = _agent(f"pdctl-prefill-{a.port}")
    buf, addr, mem, dev = _buffer(a.buffer, a.device, PATTERN)
    _register(agent, addr, a.buffer, mem, dev)
    phase("waiting for the decode side's NIXL metadata")
    remote = ch.recv()
    phase("adding the decode side's NIXL agent")
    try:
        name = agent.add_remote_agent(base64.b64decode(remote["meta"]))
    except Exception as exc:
        raise Failed("metadata", f"{type(exc).__name__}: {exc}") from None
    handles: dict[int, object] = {}

    def post(size: int, note: bytes = b"") -> None:
        if size not in handles:
            local = agent.get_xfer_descs([(addr, size, dev)], mem)
            far = agent.get_xfer_descs([(remote["addr"], size, remote["dev"])], remote["mem"])
            handles[size] = agent.initialize_xfer("WRITE", local, far, name)
        handle = handles[size]
        state = agent.transfer(handle, note)
        deadline = time.monotonic() + a.seconds + 10
        while state == "PROC":
            if time.monotonic() > deadline:
                raise Failed("transfer", f"a WRITE of {size} bytes did not complete", "ETIMEDOUT")
            state = agent.check_xfer_state(handle)
        if state != "DONE":
            raise Failed("transfer", f"NIXL transfer state {state} ({size} bytes)")

    phase("writing (UCX connects to the decode side)")
    result = measure(post, a.buffer, a.bytes, a.seconds)
    post(a.buffer, DONE)  # the whole buffer once more, with the notification
    result["backend"] = "UCX"
    ch.send(**result)
    return result
