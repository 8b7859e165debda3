"""Our own vLLM 0.23.0 start-ups on one H200 (dummy weights), as test data.

Each run's raw start-up log is kept, trimmed to the lines pdctl reads, under
tests/fixtures/vllm/h200-0.23/ (its README gives each run's command line). The figures are
parsed from the log itself (`pdctl.capacity.fromlog.parse_log`), never copied by hand; the
conditions (model, util, lengths, flags) come from the command line.

Held out: a third of the runs, chosen by the SHA-256 of the log's file name before any
error was looked at (`held_out`): nothing in pdctl was fitted to them, and they are
reported separately (docs/capacity.md).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdctl.capacity.fromlog import parse_log
from tests.capacity.vllm_logs import Log

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "h200-0.23"
SOURCE = "tests/fixtures/vllm/h200-0.23/README.md"


def held_out(file: str) -> bool:
    """One third of the runs, by the log file's name alone (decided before any error)."""
    return int(hashlib.sha256(file.encode()).hexdigest(), 16) % 3 == 0


@dataclass(frozen=True)
class Run:
    """One start-up: the log file and the command line's conditions."""

    file: str
    model: str
    kind: str
    util: float = 0.9
    max_model_len: int | None = None
    kv_cache_dtype: str = "auto"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool = False
    tp: int = 1
    config: str | None = None  # a folder of models/ holding the config.json it ran with
    total_mib: int | None = None  # CUDA's total where it is not the H200's (a HAMi slice)
    fits: bool = True
    tags: tuple[str, ...] = ()


def config(name: str | None) -> dict[str, Any] | None:
    if name is None:
        return None
    loaded: dict[str, Any] = json.loads((FIXTURES / "models" / name / "config.json").read_text())
    return loaded


# The 12 clean start-ups of the README, in its order. Left out: the two phase-2 engines that
# started at the same moment on one GPU (each profile saw the other's allocations).
RUNS: tuple[Run, ...] = (
    Run(
        "qwen3-8b-u0.5-eager.log",
        "Qwen/Qwen3-8B",
        "dense GQA, eager",
        util=0.5,
        max_model_len=4096,
        enforce_eager=True,
        config="qwen3-8b",
    ),
    Run(
        "qwen3-8b-u0.7-fp8kv.log",
        "Qwen/Qwen3-8B",
        "dense GQA, fp8 KV",
        util=0.7,
        max_model_len=4096,
        kv_cache_dtype="fp8",
        config="qwen3-8b",
        tags=("fp8",),
    ),
    Run(
        "qwen3-8b-u0.8-seqs128.log",
        "Qwen/Qwen3-8B",
        "dense GQA, 128 seqs",
        util=0.8,
        max_model_len=4096,
        max_num_seqs=128,
        max_num_batched_tokens=4096,
        config="qwen3-8b",
    ),
    Run(
        "qwen3-30b-a3b-u0.9.log",
        "Qwen/Qwen3-30B-A3B",
        "MoE",
        util=0.9,
        max_model_len=4096,
        config="qwen3-30b-a3b",
    ),
    Run(
        "deepseek-v2-lite-u0.9.log",
        "deepseek-ai/DeepSeek-V2-Lite",
        "MoE + MLA",
        util=0.9,
        max_model_len=4096,
        config="deepseek-v2-lite",
        tags=("MLA",),
    ),
    Run(
        "gemma-2-9b-u0.85.log",
        "google/gemma-2-9b",
        "dense, sliding window (hybrid)",
        util=0.85,
        max_model_len=4096,
        config="gemma-2-9b",
        tags=("hybrid",),
    ),
    Run(
        "mistral-7b-u0.6.log",
        "mistralai/Mistral-7B-v0.1",
        "dense GQA, sliding window",
        util=0.6,
        max_model_len=4096,
        config="mistral-7b",
        tags=("hybrid",),
    ),
    Run(
        "qwen3-8b-u0.95-32k.log",
        "Qwen/Qwen3-8B",
        "dense GQA, 32k",
        util=0.95,
        max_model_len=32768,
        config="qwen3-8b",
    ),
    Run(
        "phase0-qwen3-8b-u0.9.log",
        "Qwen/Qwen3-8B",
        "dense GQA (pdctl up)",
        util=0.9,
        max_model_len=4096,
        config="qwen3-8b",
    ),
    Run(
        "phase3-hami-n2-decode-0.log",
        "Qwen/Qwen3-8B",
        "dense GQA, HAMi slice 1/2",
        util=0.95,
        max_model_len=4096,
        config="qwen3-8b",
        total_mib=71885,
        tags=("HAMi",),
    ),
    Run(
        "phase3-hami-n3-decode-0.log",
        "Qwen/Qwen3-8B",
        "dense GQA, HAMi slice 1/3",
        util=0.95,
        max_model_len=4096,
        config="qwen3-8b",
        total_mib=47444,
        tags=("HAMi",),
    ),
    Run(
        "phase3-hami-n4-decode-0.log",
        "Qwen/Qwen3-8B",
        "dense GQA, HAMi slice 1/4",
        util=0.93,
        max_model_len=4096,
        config="qwen3-8b",
        total_mib=35942,
        tags=("HAMi",),
    ),
)


def log_of(run: Run) -> Log:
    """The run as a vllm_logs.Log: conditions from the command line, figures from the log."""
    seen = parse_log((FIXTURES / run.file).read_text())
    return Log(
        name=f"{run.file.removesuffix('.log')} (H200, 0.23.0)",
        url=f"../{SOURCE}",  # relative to docs/, where the benchmark's table goes
        version=seen.version or "0.23.0",
        gpu="H200",
        model=run.model,
        tp=run.tp,
        util=run.util,
        max_model_len=run.max_model_len,
        kv_cache_dtype=run.kv_cache_dtype,
        max_num_seqs=run.max_num_seqs,
        max_num_batched_tokens=run.max_num_batched_tokens,
        enforce_eager=run.enforce_eager,
        total_gib=run.total_mib / 1024 if run.total_mib else seen.total_gib,
        config=config(run.config),
        weights_gib=seen.weights_gib,
        activation_gib=seen.activation_gib,
        non_torch_gib=seen.non_torch_gib,
        kv_gib=seen.kv_available_gib,
        tokens=seen.kv_tokens,
        fits=run.fits,
        kind=run.kind,
        split="h200-holdout" if held_out(run.file) else "h200-fit",
        tags=("V1", "H200", "0.23", "pass6", *run.tags),
    )


H200_LOGS: tuple[Log, ...] = tuple(log_of(run) for run in RUNS)
