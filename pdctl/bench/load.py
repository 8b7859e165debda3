"""One bench step: the `vllm bench serve` command that sends it, and its result (pure).

The flags are those of `vllm/benchmarks/serve.py` and `vllm/benchmarks/datasets/datasets.py`
in vLLM 0.23.0 and 0.32.0/0.33.0 (https://github.com/vllm-project/vllm/blob/v0.23.0/vllm/
benchmarks/serve.py), which agree on every flag used here. `--random-range-ratio` is given as
one number: 0.32.0 also takes a JSON pair, 0.23.0 only a float."""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any

PERCENTILES = (50, 90, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")
RESULT = "result.json"
MARK = "----- pdctl bench result -----"


@dataclass(frozen=True)
class Workload:
    """What every step sends: lengths, count, SLOs (from spec.workload and spec.bench)."""

    prompt_tokens: int = 1024
    output_tokens: int = 256
    requests: int = 32
    range_ratio: float = 0.0
    seed: int = 0
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    duration_s: float | None = None


@dataclass(frozen=True)
class Step:
    """One point of the sweep: a request rate (None: all at once) or a max concurrency."""

    rate: float | None = None
    concurrency: int | None = None

    @property
    def label(self) -> str:
        if self.rate is not None and self.concurrency is not None:
            return f"rate {self.rate:g}/s, concurrency {self.concurrency}"
        if self.concurrency is not None:
            return f"concurrency {self.concurrency}"
        return f"rate {self.rate:g}/s" if self.rate is not None else "all at once"


def steps(rates: tuple[float, ...], concurrency: tuple[int, ...]) -> list[Step]:
    return [Step(rate=r) for r in rates] + [Step(concurrency=c) for c in concurrency] or [Step()]


def capped(step: Step, requests: int, most: int | None) -> Step:
    """`step` with at most `most` requests in flight (None: no bound). A step that sends all
    at once or at a rate may have every one of its `requests` in flight at one time."""
    if most is None:
        return step
    in_flight = step.concurrency if step.concurrency is not None else requests
    return step if in_flight <= most else Step(step.rate, most)


def workload_of(spec: Any) -> Workload:
    w, b = spec.workload, spec.bench
    out = Workload()
    if w is not None:
        out = Workload(w.prompt_tokens, w.output_tokens, ttft_ms=w.ttft_ms, tpot_ms=w.tpot_ms)
    if b is not None:
        from dataclasses import replace

        out = replace(
            out, requests=b.requests, range_ratio=b.range_ratio, seed=b.seed,
            duration_s=b.duration_s,
        )
    return out


def longest_prompt(w: Workload) -> int:
    """The longest prompt a step sends: `--random-range-ratio` draws lengths up to
    prompt x (1 + r)."""
    return math.ceil(w.prompt_tokens * (1 + w.range_ratio))


def requests_of(w: Workload, step: Step) -> int:
    if w.duration_s is not None and step.rate is not None:
        return max(1, math.ceil(step.rate * w.duration_s))
    return w.requests


def bench_args(
    w: Workload, step: Step, base_url: str, model: str, tokenizer: str, result_dir: str
) -> list[str]:
    """`vllm bench serve` arguments for one step against `base_url` (no /v1)."""
    args = [
        "bench", "serve", "--backend", "openai", "--base-url", base_url,
        "--endpoint", "/v1/completions", "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", "random", "--random-input-len", str(w.prompt_tokens),
        "--random-output-len", str(w.output_tokens), "--random-range-ratio", f"{w.range_ratio:g}",
        "--num-prompts", str(requests_of(w, step)), "--seed", str(w.seed),
        # every request generates its output length: the plan's traffic, and counts that add up
        "--ignore-eos",
        "--percentile-metrics", ",".join(METRICS),
        "--metric-percentiles", ",".join(str(p) for p in PERCENTILES),
        "--save-result", "--result-dir", result_dir, "--result-filename", RESULT,
        "--disable-tqdm",
    ]
    if step.rate is not None:
        args += ["--request-rate", f"{step.rate:g}"]
    if step.concurrency is not None:
        args += ["--max-concurrency", str(step.concurrency)]
    slo = [f"{k}:{v:g}" for k, v in (("ttft", w.ttft_ms), ("tpot", w.tpot_ms)) if v is not None]
    if slo:
        args += ["--goodput", *slo]
    return args


def script(setup: str, env: tuple[tuple[str, str], ...], secrets: str, vllm_args: list[str],
           work_dir: str) -> str:
    """The shell that runs one step on a host: the engines' Python environment (`setup`) and
    environment, the API key from the deployment's 0600 secrets file (never on a command
    line: `vllm bench serve` reads OPENAI_API_KEY), the result printed after MARK."""
    lines = ["set -eu", f"work={shlex.quote(work_dir)}", 'mkdir -p "$work"',
             "trap 'rm -rf -- \"$work\"' EXIT", setup]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env]
    lines += [
        f"if [ -f {shlex.quote(secrets)} ]; then set -a; . {shlex.quote(secrets)}; set +a; fi",
        'if [ -n "${VLLM_API_KEY:-}" ]; then export OPENAI_API_KEY="$VLLM_API_KEY"; fi',
        "vllm " + " ".join(shlex.quote(a) for a in vllm_args) + ' >"$work/out.log" 2>&1 || '
        '{ rc=$?; tail -n 40 "$work/out.log" >&2; exit $rc; }',
        f"echo {shlex.quote(MARK)}", f'cat "$work/{RESULT}"',
    ]
    return "\n".join(lines) + "\n"


def _ms(result: dict[str, Any], metric: str) -> dict[str, float | None]:
    out: dict[str, float | None] = {"mean": result.get(f"mean_{metric}_ms")}
    for p in PERCENTILES:
        out[f"p{p}"] = result.get(f"p{p}_{metric}_ms")
    return out


def measured(result: dict[str, Any]) -> dict[str, Any]:
    """The figures of one `vllm bench serve` result JSON (latencies in ms)."""
    return {
        "completed": result.get("completed"),
        "failed": result.get("failed", 0),
        "durationS": result.get("duration"),
        "inputTokens": result.get("total_input_tokens"),
        "outputTokens": result.get("total_output_tokens"),
        "requestThroughput": result.get("request_throughput"),
        "outputThroughput": result.get("output_throughput"),
        "totalTokenThroughput": result.get("total_token_throughput"),
        "requestGoodput": result.get("request_goodput"),
        "maxConcurrentRequests": result.get("max_concurrent_requests"),
        **{f"{m}Ms": _ms(result, m) for m in METRICS},
    }
