"""NCCL transport of the transfer agent (P2pNcclConnector), through torch.distributed with
the nccl backend: a world of two ranks, the listener rank 0 hosting the rendezvous (torch's
TCPStore) on its address and port, the sender rank 1; the sender's GPU tensor goes to the
listener with send/recv. NCCL reads NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_IB_GID_INDEX and
the other NCCL_* variables from the environment and logs its failures on stderr
(NCCL_DEBUG=WARN is set when unset)."""

from __future__ import annotations

import os
import time
from datetime import timedelta

from agent import Failed, emit, measure

PATTERN = 0xA5


def run(a) -> dict:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("NCCL_DEBUG", "WARN")
    if not torch.cuda.is_available():
        raise Failed("transport", "no CUDA device: NCCL needs a GPU on both hosts")
    listener = a.side == "listen"
    address = a.bind if listener else a.to
    if listener:
        emit("listening", address=address, port=a.port)
    try:
        dist.init_process_group(
            "nccl",
            init_method=f"tcp://{address}:{a.port}",
            rank=0 if listener else 1,
            world_size=2,
            timeout=timedelta(seconds=a.seconds + 20),
        )
    except Exception as exc:  # DistNetworkError, DistStoreError: the rendezvous
        raise Failed("connect", f"{type(exc).__name__}: {exc}", "ETIMEDOUT"
                     if "timed out" in str(exc).lower() or "timeout" in str(exc).lower()
                     else "") from None
    if not listener:
        emit("connected", address=address, port=a.port)
    device = torch.device("cuda", torch.cuda.current_device())
    buf = torch.full((a.buffer,), PATTERN if not listener else 0, dtype=torch.uint8,
                     device=device)
    try:
        if listener:
            sizes = torch.zeros(1, dtype=torch.int64, device=device)
            received = 0
            while True:
                dist.recv(sizes, src=1)
                size = int(sizes.item())
                if size == 0:
                    break
                dist.recv(buf[:size], src=1)
                received += size
            figures = torch.zeros(4, dtype=torch.float64, device=device)
            dist.recv(figures, src=1)
            moved, took, gbps, lat = figures.tolist()
            verified = int(buf[0].item()) == PATTERN
            return {"bytes": int(moved), "seconds": took, "gbps": gbps, "latency_us": lat,
                    "received": received, "verified": verified, "backend": "nccl"}

        def post(size: int) -> None:
            dist.send(torch.tensor([size], dtype=torch.int64, device=device), dst=0)
            dist.send(buf[:size], dst=0)
            torch.cuda.synchronize(device)

        result = measure(post, a.buffer, a.bytes, a.seconds)
        dist.send(torch.tensor([0], dtype=torch.int64, device=device), dst=0)
        figures = [result["bytes"], result["seconds"], result["gbps"], result["latency_us"]]
        dist.send(torch.tensor(figures, dtype=torch.float64, device=device), dst=0)
        torch.cuda.synchronize(device)
        time.sleep(0.1)
        result["backend"] = "nccl"
        return result
    finally:
        dist.destroy_process_group()
