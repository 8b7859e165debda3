"""The speed scenario of the GPU harness (issue 35): measured TTFT, TPOT, ITL, E2E and
throughput of real vLLM engines at several loads, for the speed model `pdctl plan --load`
is calibrated on and judged against.

For each model (tests/gpu/models/<name>/config.json, `--load-format dummy`, a word-level
tokenizer so prompts have exact lengths), `pdctl up` starts a phase 0 engine over SSH; then a
closed-loop load of N concurrent streaming completions (as `vllm bench serve
--max-concurrency N` sends, with its metric definitions: TTFT = first token - send, TPOT =
(last - first) / (output - 1), ITL = gaps between tokens, E2E = last - send) runs for each
(workload, concurrency) cell, and `pdctl down` stops it. Every prompt is distinct and the
engine runs with `--no-enable-prefix-caching`, so every prompt token is prefilled: the cells
measure prefill, not the prefix cache (the engine's own prefix-cache counters are recorded to
prove it). The engine's /metrics histograms (prefill, decode, queue time; tokens per step)
are kept as deltas around each cell.

The held-out rule (committed before any of this data existed, issue 35): a cell
"model/workload/cN" is held out of the fitting when sha256 of that key, read as an integer,
is divisible by 3 (`held_out`). The fit sees only the other cells; the held-out ones are
evaluated once, after the constants are frozen.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import random
import re
import statistics
import threading
import time
from pathlib import Path
from typing import Any

# (name, prompt tokens, output tokens, concurrencies): the prefill-heavy and
# decode-heavy workloads, four loads each.
WORKLOADS = (
    ("prefill", 4096, 128, (1, 4, 16, 48)),
    ("decode", 256, 1024, (1, 8, 32, 128)),
)
MODELS = ("qwen3-8b", "qwen3-30b-a3b", "deepseek-v2-lite", "qwen3-32b", "mistral-7b")
# Config quality (issue 35 item 4): one model, engine configurations a user would try (extra
# vllm args, --gpu-memory-utilization), in the order a cut-short call should keep; each is
# measured on a decode-heavy and a prefill-heavy cell near saturation.
# Open-loop cells (`drive.py rates`): Poisson arrivals at a fixed rate (requests/s) for
# RATE_SUBMIT_S, each cell run twice on the same engine with the same arrivals and prompts.
# Added after the closed-loop cells' TTFT p50 proved not reproducible: the same 16 cells on
# two H100 machines a day apart differed by 12% on average (32% at most), TPOT by 4% and
# throughput by 3% (docs/performance.md): a closed loop's two synchronised bursts put TTFT at
# the mercy of how the API server takes a burst in. The repeat measures that noise directly.
RATE_WORKLOADS = (
    ("decode", 256, 1024, (4.0, 8.0)),  # Qwen3-8B on an H100 serves ~9.5 of these a second
    ("prefill", 4096, 128, (2.0, 4.0)),  # ... and ~5.5 of these
)
RATE_SUBMIT_S = 30.0
RATE_REPEATS = 2
# Cells the speed model has never seen, added on 2026-12-06 after its asynchronous-scheduling
# and API-server terms went in: their predictions (benchmarks/predict_rates.py --set fresh) are
# committed before the GPU runs them, and none of them is ever fitted on. One run each (the
# repeats above agree within 2%).
FRESH_RATE_WORKLOADS = (
    ("decode", 256, 1024, (6.0,)),
    ("prefill", 4096, 128, (3.0,)),
    ("mixed", 1024, 256, (6.0, 12.0)),
)
RATE_SETS = {"main": (RATE_WORKLOADS, RATE_REPEATS), "fresh": (FRESH_RATE_WORKLOADS, 1)}
SWEEP_MODEL = "qwen3-8b"
SWEEP_CONFIGS: dict[str, tuple[list[str], float]] = {
    "base": ([], 0.9),
    "seqs64": (["--max-num-seqs", "64"], 0.9),
    "mbt2048": (["--max-num-batched-tokens", "2048"], 0.9),
    "eager": (["--enforce-eager"], 0.9),
    "fp8kv": (["--kv-cache-dtype", "fp8"], 0.9),
    "seqs256": (["--max-num-seqs", "256"], 0.9),
    "mbt16384": (["--max-num-batched-tokens", "16384"], 0.9),
    "mbt4096": (["--max-num-batched-tokens", "4096"], 0.9),
    "seqs128": (["--max-num-seqs", "128"], 0.9),
    "util095": ([], 0.95),
}
SWEEP_CELLS = (("decode", 256, 1024, 128), ("prefill", 4096, 128, 16))
STEP_SUBMIT_S = 25.0  # a cell stops sending new requests after this long (in-flight ones end)
HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:time_per_output_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:iteration_tokens_total",
)
COUNTERS = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total",
    "vllm:request_success_total",
)


def cell_key(model: str, workload: str, concurrency: int) -> str:
    return f"{model}/{workload}/c{concurrency}"


def rate_key(model: str, workload: str, rate: float, repeat: int = 1) -> str:
    """An open-loop cell's key; a repeat of the same cell gets `#2`, `#3`."""
    return f"{model}/{workload}/r{rate:g}" + (f"#{repeat}" if repeat > 1 else "")


def held_out(key: str) -> bool:
    """The committed rule: held out of the fit when sha256(key) % 3 == 0."""
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % 3 == 0


def requests_for(concurrency: int) -> int:
    """At least two rounds of the concurrency (a steady middle), at least 3 requests."""
    return max(3, 2 * concurrency)


def prompt(n: int, rng: random.Random, vocab: int) -> str:
    """n words of the word-level tokenizer (tests/gpu/tokenizer.py): n tokens, ids >= 16 so no
    special token; random, so no two prompts share a block."""
    return " ".join(f"t{rng.randrange(16, vocab)}" for _ in range(n))


def stream_one(host: str, port: int, model: str, text: str, max_tokens: int,
               timeout: float = 900) -> dict[str, Any]:
    """One streaming completion; the arrival time of every chunk that carries text."""
    body = json.dumps({
        "model": model, "prompt": text, "max_tokens": max_tokens, "temperature": 0,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
    })
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.perf_counter()
    times: list[float] = []
    usage: dict[str, Any] = {}
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return {"error": f"HTTP {resp.status}: {resp.read()[:200]!r}", "t0": t0}
        while True:
            line = resp.readline()
            if not line:
                break
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            now = time.perf_counter()
            if b'"usage":{' in line or b'"usage": {' in line:
                doc = json.loads(line[6:])
                if doc.get("usage"):
                    usage = doc["usage"]
                if not doc.get("choices"):
                    continue
            times.append(now)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "t0": t0}
    finally:
        conn.close()
    return {"t0": t0, "times": times, "usage": usage}


def run_cell(host: str, port: int, model: str, vocab: int, prompt_tokens: int,
             output_tokens: int, concurrency: int, seed: int,
             submit_s: float = STEP_SUBMIT_S) -> dict[str, Any]:
    """A closed loop: `concurrency` workers, each sending its next request when its last one
    ended, until requests_for(concurrency) were sent or submit_s passed."""
    rng = random.Random(seed)
    total = requests_for(concurrency)
    texts = [prompt(prompt_tokens, rng, vocab) for _ in range(total)]
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    nxt = [0]
    start = time.perf_counter()

    def worker() -> None:
        while True:
            with lock:
                i = nxt[0]
                if i >= total or (i >= concurrency and time.perf_counter() - start > submit_s):
                    return
                nxt[0] += 1
            r = stream_one(host, port, model, texts[i], output_tokens)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = time.perf_counter()
    return summarise(results, start, end, concurrency, prompt_tokens, output_tokens, submit_s)


def arrivals(rate: float, submit_s: float, seed: int) -> list[float]:
    """Poisson arrival times (seconds from the cell's start) until submit_s."""
    rng = random.Random(seed)
    out: list[float] = []
    t = rng.expovariate(rate)
    while t <= submit_s:
        out.append(t)
        t += rng.expovariate(rate)
    return out


def run_rate_cell(host: str, port: int, model: str, vocab: int, prompt_tokens: int,
                  output_tokens: int, rate: float, seed: int,
                  submit_s: float = RATE_SUBMIT_S) -> dict[str, Any]:
    """An open loop: requests sent at Poisson times of `rate` per second until submit_s,
    each on its own connection whatever the ones before it are doing (`vllm bench serve
    --request-rate`)."""
    times = arrivals(rate, submit_s, seed)
    rng = random.Random(seed)
    texts = [prompt(prompt_tokens, rng, vocab) for _ in times]
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    start = time.perf_counter()

    def one(at: float, text: str) -> None:
        time.sleep(max(0.0, start + at - time.perf_counter()))
        r = stream_one(host, port, model, text, output_tokens)
        with lock:
            results.append(r)

    threads = [threading.Thread(target=one, args=(at, text), daemon=True)
               for at, text in zip(times, texts, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cell = summarise(results, start, time.perf_counter(), 0, prompt_tokens, output_tokens,
                     submit_s)
    cell["concurrency"], cell["rate"] = None, rate
    return cell


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarise(results: list[dict[str, Any]], start: float, end: float, concurrency: int,
              prompt_tokens: int, output_tokens: int,
              submit_s: float = STEP_SUBMIT_S) -> dict[str, Any]:
    ok = [r for r in results if "times" in r and r["times"]]
    errors = sorted({r.get("error", "no tokens") for r in results if r not in ok})
    ttft = [(r["times"][0] - r["t0"]) * 1000 for r in ok]
    e2e = [(r["times"][-1] - r["t0"]) * 1000 for r in ok]
    tpot, itl = [], []
    out_tokens = 0
    for r in ok:
        n = int(r["usage"].get("completion_tokens") or len(r["times"]))
        out_tokens += n
        if n > 1:
            tpot.append((r["times"][-1] - r["times"][0]) * 1000 / (n - 1))
        itl += [(b - a) * 1000 for a, b in zip(r["times"], r["times"][1:], strict=False)]
    wall = end - start

    def stats(xs: list[float]) -> dict[str, float | None]:
        return {
            "mean": round(statistics.fmean(xs), 3) if xs else None,
            "p50": round(pct(xs, 50), 3) if xs else None,  # type: ignore[arg-type]
            "p90": round(pct(xs, 90), 3) if xs else None,  # type: ignore[arg-type]
            "p99": round(pct(xs, 99), 3) if xs else None,  # type: ignore[arg-type]
        }

    return {
        "concurrency": concurrency,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "requests": len(results),
        "submit_s": submit_s,
        "completed": len(ok),
        "errors": errors[:3],
        "wall_s": round(wall, 3),
        "output_tokens_total": out_tokens,
        "output_tok_s": round(out_tokens / wall, 1) if wall else None,
        "request_s": round(len(ok) / wall, 3) if wall else None,
        "ttft_ms": stats(ttft),
        "tpot_ms": stats(tpot),
        "itl_ms": stats(itl),
        "e2e_ms": stats(e2e),
        "chunks_per_request": round(statistics.fmean(len(r["times"]) for r in ok), 1) if ok else 0,
        # Each completed request as [sent s after the cell began, TTFT ms, E2E ms, tokens], for
        # fits that need more than the percentiles (the queue at a closed loop's first round).
        "raw": [[round(r["t0"] - start, 4), round((r["times"][0] - r["t0"]) * 1000, 2),
                 round((r["times"][-1] - r["t0"]) * 1000, 2),
                 int(r["usage"].get("completion_tokens") or len(r["times"]))] for r in ok],
    }


_SAMPLE = re.compile(r'^([a-zA-Z_:][\w:]*)(\{[^}]*\})? ([-+.\deE]+|NaN|\+Inf)$')


def scrape(text: str) -> dict[str, float]:
    """The counters and histogram (_sum, _count, _bucket) samples the speed model uses, summed
    over label sets other than `le`."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        base = re.sub(r"_(sum|count|bucket)$", "", name)
        if base not in HISTOGRAMS and name not in COUNTERS and base not in COUNTERS:
            continue
        le = re.search(r'le="([^"]+)"', labels)
        key = name + (f'{{le="{le.group(1)}"}}' if le else "")
        try:
            out[key] = out.get(key, 0.0) + float(value)
        except ValueError:
            continue
    return out


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 6) for k, v in after.items()
            if v - before.get(k, 0.0) != 0}


def gpu_name() -> str:
    """pdctl's name of GPU 0 (nvidia-smi's name: "NVIDIA H200", "NVIDIA H100 80GB HBM3")."""
    import subprocess

    out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                         capture_output=True, text=True, check=False).stdout
    if "H200" in out:
        return "H200"
    if "H100" in out:
        return "H100-PCIe" if "PCIe" in out else "H100-SXM"
    return "H200"


def spec_for(model_dir: Path, name: str, host: dict[str, Any], engine: dict[str, Any],
             extra: list[str] | None = None, util: float = 0.9,
             gpu: str = "H200") -> dict[str, Any]:
    """Phase 0, one engine on GPU 0, the user's default engine settings except the dummy
    weights and the prefix cache."""
    return {
        "name": f"spd-{name.replace('.', '')}"[:40],
        "phase": 0,
        "model": {"name": str(model_dir), "servedName": name, "maxModelLen": 8192,
                  "config": str(model_dir / "config.json")},
        "engine": engine,
        "hardware": {"gpu": gpu},
        "hosts": [host],
        "serve": {"port": 8000, "gpuMemoryUtilization": util,
                  "extraArgs": ["--load-format", "dummy", "--no-enable-prefix-caching",
                                *(extra or [])]},
    }


def engine_config(log: str) -> dict[str, Any]:
    """What the engine says it runs with: non-default args, batched tokens, seqs, graphs."""
    found: dict[str, Any] = {}
    for pat, key in (
        (r"non-default args: (\{.*\})", "non_default_args"),
        (r"max_num_batched_tokens=(\d+)", "max_num_batched_tokens"),
        (r"max_num_seqs=(\d+)", "max_num_seqs"),
        (r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)", "chunked_prefill"),
        (r"cudagraph_capture_sizes['\"]?: \[([\d, ]+)\]", "capture_sizes"),
        (r"(Using [A-Za-z0-9_ ]*(?:[Aa]ttention|MLA)[A-Za-z0-9_ ]* backend[^\n]*)", "attention"),
        (r"(Using [^\n]*MoE[^\n]*)", "moe"),
    ):
        m = re.findall(pat, log)
        if m:
            found[key] = m[-1][-400:] if isinstance(m[-1], str) else m[-1]
    return found
