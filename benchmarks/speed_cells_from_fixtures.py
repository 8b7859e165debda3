"""Turn the H200 recordings made before the speed scenario existed into speed cells
(tests/fixtures/gpu/vllm023-h200/speed/qwen3-8b-early.json): the phase 0 batches (all requests at
once, tests/fixtures/gpu/vllm023-h200/phase0/results.json) and the `pdctl bench` steps
(bench/bench.json), each with the prompt tokens the engine's own metrics say it found in its
prefix cache (the bench's `vllm bench serve` sent the same seeded prompts at every step).

usage: python benchmarks/speed_cells_from_fixtures.py
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests/fixtures/gpu/vllm023-h200"


def held_out(key: str) -> bool:  # tests/gpu/speed.py's rule
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % 3 == 0


def main() -> None:
    cells = {}
    p0 = json.loads((FIX / "phase0/results.json").read_text())
    for b in p0["batches"]:
        prompt = round(b["prompt_tokens"] / b["ok"])
        key = f"qwen3-8b/all-at-once-{prompt}x256/b{b['batch']}"
        cells[key] = {
            "source": "phase0/results.json batches", "concurrency": None, "submit_s": None,
            "prompt_tokens": prompt, "output_tokens": b["completion_tokens"] // b["ok"],
            "requests": b["ok"], "completed": b["ok"], "wall_s": b["wall_s"],
            "output_tok_s": b["tok_s"], "ttft_ms": None, "tpot_ms": None,
            "stream": False,  # tests/gpu/drive.py batch(): plain /v1/completions, one answer
            "held_out": held_out(key),
        }
    bench = json.loads((FIX / "bench/bench.json").read_text())
    for step in bench["steps"]:
        m = step["measured"]
        inst = step["metrics"]["instances"][0]
        c = int(step["load"].split()[-1])
        key = f"qwen3-8b/bench-1024x256/c{c}"
        hits = inst["prompt_by_source"]["local_cache_hit"]
        cells[key] = {
            "source": "bench/bench.json steps", "concurrency": c, "submit_s": None,
            "prompt_tokens": 1024, "output_tokens": 256, "requests": m["completed"],
            "completed": m["completed"], "cached_tokens": round(hits / inst["requests"]),
            "output_tok_s": round(m["outputThroughput"], 1),
            "ttft_ms": {k: round(v, 3) for k, v in m["ttftMs"].items()},
            "tpot_ms": {k: round(v, 3) for k, v in m["tpotMs"].items()},
            "held_out": held_out(key),
        }
    doc = {
        "model": "qwen3-8b",
        "note": "derived from the 2026-12-01/02 recordings (phase0, bench); prefix cache on",
        "spec": {"hardware": {"gpu": "H200"}, "engine": {"version": "0.23.0"},
                 "model": {"maxModelLen": 4096}, "serve": {"gpuMemoryUtilization": 0.9}},
        "units": {"serve": {"kv_tokens": 794016}},
        "engine": {"max_num_batched_tokens": 8192, "max_num_seqs": 1024},
        "cells": cells,
    }
    out = FIX / "speed/qwen3-8b-early.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}: {len(cells)} cells")


if __name__ == "__main__":
    main()
