"""How many descriptors prefill's MooncakeConnector writes for a burst's KV, burst after burst:
vLLM's own KV block pool, a prefill's and a decode's, driven the way a P/D pair uses them
(docs/phase2-bare-metal.md, "Why the burst stalled: Mooncake's TCP queue per peer").

    python benchmarks/vllm_block_runs.py [--block-pool FILE] [--blocks N] [--prompt TOKENS]
                                         [--output TOKENS] [--burst R] [--bursts K]

Needs a Python where `vllm` imports (pdctl's CI has the vLLM CPU build); nothing runs on a GPU
and nothing connects anywhere. Each burst: R requests of TOKENS prompt tokens get their blocks
on prefill and on decode (`get_new_blocks`, as the scheduler does), prefill frees them once the
KV is sent, decode adds a block every 16 generated tokens to each request in turn and frees
each request when it ends, in a random order (`free_blocks` in reverse order of the request's
blocks, as vLLM's KV cache manager frees them). Per burst it prints the runs of blocks that are
consecutive on both sides (vLLM's `group_concurrent_contiguous`): the connector writes one
descriptor per run per KV region (2 per layer), all of a step's ready requests in one batch.

`--block-pool FILE` runs another release's vllm/v1/core/block_pool.py against the installed
vllm, e.g. 0.23.0's, the release pdctl pins on GPUs:
`unzip -j vllm-0.23.0-...whl vllm/v1/core/block_pool.py -d /tmp/v23`.

Measured (default arguments: 18,000 blocks, a burst of 32 prompts of 1,024 tokens, 128 output
tokens, 14 bursts): 0.23.0's block pool gives 32 runs a burst (one per request) until the pool
has been used through (207 in the 8th), then 2,048, one per block, from the 9th burst on;
0.32.0's (which hands a freed block that holds no prefix-cache entry out first) gives 2,048 in
every second burst from the 2nd on, and 500 to 1,640 in the ones between."""

from __future__ import annotations

import argparse
import importlib.util
import math
import random
import sys


def block_pool(path: str | None):
    if path is None:
        from vllm.v1.core.block_pool import BlockPool
        return BlockPool
    spec = importlib.util.spec_from_file_location("other_block_pool", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.BlockPool


def runs(src: list[int], dst: list[int]) -> int:
    """Runs of blocks consecutive on both sides (as group_concurrent_contiguous splits them)."""
    return 1 + sum(1 for i in range(1, len(src))
                   if src[i] - src[i - 1] != 1 or dst[i] - dst[i - 1] != 1) if src else 0


def bursts(pool_class, blocks: int, prompt: int, output: int, burst: int, count: int,
           block: int = 16, seed: int = 0) -> list[int]:
    """Runs of each burst's KV pull (all its requests in one batch)."""
    rnd = random.Random(seed)
    prefill, decode = pool_class(blocks, False, block), pool_class(blocks, False, block)
    out = []
    for _ in range(count):
        n = math.ceil(prompt / block)
        reqs = [(prefill.get_new_blocks(n), decode.get_new_blocks(n)) for _ in range(burst)]
        out.append(sum(runs([b.block_id for b in p], [b.block_id for b in d]) for p, d in reqs))
        for p, _ in reqs:  # prefill frees a request's blocks once its KV is sent
            prefill.free_blocks(reversed(p))
        for t in range(output):  # decode: a new block every `block` tokens, request by request
            for _, d in reqs:
                if (prompt + t) % block == 0:
                    d.extend(decode.get_new_blocks(1))
        for i in rnd.sample(range(burst), burst):
            decode.free_blocks(reversed(reqs[i][1]))
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--block-pool")
    ap.add_argument("--blocks", type=int, default=18000)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--output", type=int, default=128)
    ap.add_argument("--burst", type=int, default=32)
    ap.add_argument("--bursts", type=int, default=14)
    a = ap.parse_args(argv)
    got = bursts(block_pool(a.block_pool), a.blocks, a.prompt, a.output, a.burst, a.bursts)
    print(f"{a.burst} requests of {a.prompt} prompt tokens "
          f"({math.ceil(a.prompt / 16)} blocks each), {a.blocks} blocks a pool")
    for i, r in enumerate(got, 1):
        print(f"  burst {i:>2}: {r:>6} runs (descriptors per KV region)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
