"""Recorded speed cells (the GPU harness's speed scenario, tests/gpu/speed.py) against the
simulator: what the fit in benchmarks/fit_speed.py minimises and the replay tests check (pure,
given the recordings' parsed JSON).

A recording is one model's JSON: its spec, the engine's start-up facts (KV tokens) and its
cells, each a closed-loop load with measured TTFT, TPOT, ITL, E2E and throughput."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from pdctl.capacity.fit import Shape
from pdctl.capacity.gpus import GPUS
from pdctl.capacity.models import ModelConfig
from pdctl.capacity.profile import async_scheduling
from pdctl.capacity.roofline import weights_read_per_step
from pdctl.capacity.simulate import Load, simulate
from pdctl.capacity.steptime import Calibration, engine_for
from pdctl.plan.args import flag_values

# the figures the issue judges, measured name -> simulated name
FIGURES = (("ttft", "ttftMs"), ("tpot", "tpotMs"), ("throughput", "outputThroughput"))
SUBMIT_S = 25.0  # tests/gpu/speed.py STEP_SUBMIT_S: a cell stops sending after this long


@dataclass(frozen=True)
class Cell:
    key: str  # model/workload/cN
    model: ModelConfig
    gpu: str
    engine: str
    max_model_len: int
    kv_tokens: int | None
    batched_tokens: int
    seqs: int
    load: Load
    measured: dict[str, float]  # ttft, tpot (p50 ms), throughput (output tok/s)
    held_out: bool
    # the measured TPOT is below the least time a step of its batch takes to read the weights
    # (all but unrouted experts, at the datasheet bandwidth): the engine did not run the
    # model the speed model describes (dummy weights routing a MoE batch to few experts)
    below_bound: bool = False
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    async_scheduling: bool = True  # vLLM 0.23's default; --no-async-scheduling turns it off


def cells_of(doc: dict[str, Any], model: ModelConfig) -> list[Cell]:
    """The completed cells of one recording."""
    spec = doc["spec"]
    gpu = spec.get("hardware", {}).get("gpu", "H200")
    engine = spec.get("engine", {}).get("version", "0.23.0")
    kv = next((u.get("kv_tokens") for u in (doc.get("units") or {}).values()), None)
    eng = doc.get("engine") or {}
    extra = [*(spec.get("serve", {}).get("extraArgs") or []),
             *(spec.get("engine", {}).get("extraArgs") or [])]
    args = flag_values(extra)
    shape = Shape(gpu=gpu, engine=engine, max_model_len=spec["model"].get("maxModelLen"),
                  kv_cache_dtype=args.get("--kv-cache-dtype", "auto"),
                  enforce_eager="--enforce-eager" in args)
    util = spec.get("serve", {}).get("gpuMemoryUtilization", 0.9)
    tokens, seqs = shape.batching(int(GPUS[gpu].usable_bytes * util))
    tokens = int(eng.get("max_num_batched_tokens") or args.get("--max-num-batched-tokens")
                 or tokens)
    seqs = int(eng.get("max_num_seqs") or args.get("--max-num-seqs") or seqs)
    out = []
    for key, c in sorted(doc.get("cells", {}).items()):
        if "skipped" in c or not c.get("completed"):
            continue
        warm = int(c.get("warmup_requests") or 0)
        load = Load(
            c["prompt_tokens"],
            c["output_tokens"],
            c["requests"] - warm,
            concurrency=c.get("concurrency"),
            rate=c.get("rate"),
            submit_s=c.get("submit_s", SUBMIT_S),
            cached_tokens=int(c.get("cached_tokens", 0)),
            # an open-loop cell replays the times its requests were really sent
            arrivals=tuple(sorted(r[0] for r in c["raw"])[warm:]) if c.get("rate") else None,
            stream=bool(c.get("stream", True)),
        )
        below = _below_bound(c, model, shape, gpu)
        measured = {
            "ttft": (c.get("ttft_ms") or {}).get("p50"),
            "tpot": (c.get("tpot_ms") or {}).get("p50"),
            "throughput": c["output_tok_s"],
        } if not warm else _without_warmup(c["raw"], warm)
        out.append(
            Cell(key, model, gpu, engine, shape.max_model_len or 0, kv, tokens, seqs, load,
                 measured, bool(c.get("held_out")), below, shape.kv_cache_dtype,
                 shape.enforce_eager, async_scheduling(engine, 1, extra))
        )
    return out


def _without_warmup(raw: list[list[float]], warm: int) -> dict[str, float]:
    """The figures of a cell's requests but its first `warm` ones (raw: [sent s, TTFT ms, E2E
    ms, tokens]): those paid the engine's first use of a shape (a MoE kernel compiling for the
    first 4,096-token prefill took 0.5 s), which `vllm bench serve` leaves to its initial
    test prompt."""
    kept = sorted(raw)[warm:]
    start = kept[0][0]
    end = max(sent + e2e / 1000 for sent, _, e2e, _ in kept)
    return {
        "ttft": statistics.median(r[1] for r in kept),
        "tpot": statistics.median((r[2] - r[1]) / (r[3] - 1) for r in kept if r[3] > 1),
        "throughput": sum(r[3] for r in kept) / (end - start),
    }


def _below_bound(cell: dict[str, Any], model: ModelConfig, shape: Shape, gpu: str) -> bool:
    """Whether the cell's TPOT p50 beats reading its batch's weights at peak bandwidth; the
    batch is the engine's own mean (generated tokens / steps), else the concurrency."""
    tpot = (cell.get("tpot_ms") or {}).get("p50")
    metrics = cell.get("engine_metrics") or {}
    gen = metrics.get("vllm:generation_tokens_total")
    steps = metrics.get("vllm:iteration_tokens_total_count")
    batch = gen / steps if gen and steps else cell.get("concurrency") or 1
    if not tpot:
        return False
    bound_s = weights_read_per_step(model, shape, max(1, round(batch))) / (
        GPUS[gpu].bandwidth_gbs * 1e9)
    return tpot / 1000 < bound_s


def predict(cell: Cell, cal: Calibration) -> dict[str, float]:
    """The simulator's figures for one cell under `cal`."""
    shape = Shape(gpu=cell.gpu, engine=cell.engine, max_model_len=cell.max_model_len,
                  kv_cache_dtype=cell.kv_cache_dtype, enforce_eager=cell.enforce_eager,
                  async_scheduling=cell.async_scheduling)
    engine = engine_for(cell.model, GPUS[cell.gpu], shape, cal=cal)
    s = simulate(engine, cell.load, cell.batched_tokens, cell.seqs, cell.kv_tokens).summary()
    return {
        "ttft": s["ttftMs"]["p50"],  # type: ignore[index]
        "tpot": s["tpotMs"]["p50"],  # type: ignore[index]
        "throughput": s["outputThroughput"],  # type: ignore[dict-item]
    }


def errors(cells: list[Cell], cal: Calibration) -> dict[str, dict[str, float]]:
    """Per cell, per figure: predicted / measured - 1."""
    out: dict[str, dict[str, float]] = {}
    for c in cells:
        p = predict(c, cal)
        out[c.key] = {
            f: (p[f] / c.measured[f] - 1) if c.measured.get(f) and p.get(f) else math.nan
            for f, _ in FIGURES
        }
    return out


def mape(errs: dict[str, dict[str, float]]) -> dict[str, float]:
    """Mean absolute percentage error per figure, over the cells given."""
    out = {}
    for f, _ in FIGURES:
        xs = [abs(e[f]) for e in errs.values() if not math.isnan(e[f])]
        out[f] = 100 * sum(xs) / len(xs) if xs else math.nan
    return out
