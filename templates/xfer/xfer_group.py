"""All-to-all of a multi-node group (the transfer agent's `group` transport), through
torch.distributed as vLLM's own groups: the `nccl` backend on GPUs, `gloo` on CPU engines.
Rank 0 (the group's leader) hosts the rendezvous (torch's TCPStore) on its address and the
group's rendezvous port; every rank sends one slice of its buffer to every other rank with
all_to_all_single, and checks that each slice it got came from the right rank. NCCL and Gloo
read NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / NCCL_IB_HCA from the environment."""

from __future__ import annotations

import os
from datetime import timedelta

from agent import Failed, emit, measure


def run(a) -> dict:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("NCCL_DEBUG", "WARN")
    gpu = a.backend == "nccl"
    if gpu and not torch.cuda.is_available():
        raise Failed("transport", "no CUDA device: the nccl backend needs a GPU on every node")
    if a.rank == 0:
        emit("listening", address=a.to, port=a.port)
    try:
        dist.init_process_group(
            a.backend,
            init_method=f"tcp://{a.to}:{a.port}",
            rank=a.rank,
            world_size=a.world,
            timeout=timedelta(seconds=a.seconds + 20),
        )
    except Exception as exc:  # DistNetworkError, DistStoreError: the rendezvous
        text = f"{type(exc).__name__}: {exc}"
        raise Failed("connect", text, "ETIMEDOUT" if "time" in text.lower() else "") from None
    if a.rank:
        emit("connected", address=a.to, port=a.port)
    device = torch.device("cuda", torch.cuda.current_device()) if gpu else torch.device("cpu")
    size = max(a.world, a.buffer // a.world * a.world)
    source = torch.empty(size, dtype=torch.uint8, device=device)
    for peer in range(a.world):  # slice j goes to rank j; it carries this rank's mark
        source[peer * size // a.world:(peer + 1) * size // a.world] = a.rank + 1
    target = torch.zeros(size, dtype=torch.uint8, device=device)

    def post(n: int) -> None:  # the last, whole-buffer one is checked
        n = max(a.world, n // a.world * a.world)
        dist.all_to_all_single(target[:n], source[:n])
        if gpu:
            torch.cuda.synchronize(device)

    try:
        result = measure(post, size, a.bytes, a.seconds)
        post(size)
        per = size // a.world
        verified = all(int(target[j * per].item()) == j + 1 and
                       int(target[(j + 1) * per - 1].item()) == j + 1 for j in range(a.world))
        result.update(rank=a.rank, world=a.world, verified=verified, backend=a.backend)
        dist.barrier()
        return result
    finally:
        dist.destroy_process_group()
