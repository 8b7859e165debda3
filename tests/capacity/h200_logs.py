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

import yaml

from pdctl.capacity.fromlog import parse_log
from tests.capacity.vllm_logs import Log

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "h200-0.23"


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
    # --speculative-config: method, num_speculative_tokens, model; draft: the models/ folder
    # of the draft's config.json (given to pdctl as speculative.config)
    speculative: dict[str, Any] | None = None
    fits: bool = True
    tags: tuple[str, ...] = ()


def config(name: str | None, folder: Path = FIXTURES) -> dict[str, Any] | None:
    if name is None:
        return None
    loaded: dict[str, Any] = json.loads((folder / "models" / name / "config.json").read_text())
    return loaded


def runs(folder: Path) -> tuple[Run, ...]:
    """The start-ups of FOLDER's runs.yaml, in its order."""
    return tuple(
        Run(**{**r, "tags": tuple(r.get("tags", ()))})
        for r in yaml.safe_load((folder / "runs.yaml").read_text())
    )


# The 12 clean start-ups of the README, in its order (runs.yaml says which were left out).
RUNS: tuple[Run, ...] = runs(FIXTURES)


def log_of(run: Run, folder: Path = FIXTURES, gpu: str = "H200") -> Log:
    """The run as a vllm_logs.Log: conditions from the command line, figures from the log."""
    seen = parse_log((folder / run.file).read_text())
    spec = run.speculative
    if spec is not None and spec.get("draft"):
        spec = {**spec, "draft": config(spec["draft"], folder)}
    where = gpu.lower()
    return Log(
        name=f"{run.file.removesuffix('.log')} ({gpu}, 0.23.0)",
        url=f"../tests/fixtures/vllm/{folder.name}/README.md",  # relative to docs/
        version=seen.version or "0.23.0",
        gpu=gpu,
        model=run.model,
        tp=run.tp,
        util=run.util,
        max_model_len=run.max_model_len,
        kv_cache_dtype=run.kv_cache_dtype,
        max_num_seqs=run.max_num_seqs,
        max_num_batched_tokens=run.max_num_batched_tokens,
        enforce_eager=run.enforce_eager,
        total_gib=run.total_mib / 1024 if run.total_mib else seen.total_gib,
        config=config(run.config, folder),
        weights_gib=seen.weights_gib,
        activation_gib=seen.activation_gib,
        non_torch_gib=seen.non_torch_gib,
        kv_gib=seen.kv_available_gib,
        tokens=seen.kv_tokens,
        speculative=spec,
        fits=run.fits,
        kind=run.kind,
        split=f"{where}-holdout" if held_out(run.file) else f"{where}-fit",
        tags=("V1", gpu, "0.23", "pass6", *run.tags),
    )


H200_LOGS: tuple[Log, ...] = tuple(log_of(run) for run in RUNS)
