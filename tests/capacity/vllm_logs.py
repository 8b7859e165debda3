"""Real vLLM start-up logs from public GitHub issues (the cases:
tests/fixtures/capacity/vllm_logs.yaml, which says what they are) and pdctl's prediction of each.

`predict(case)` runs pdctl's end-to-end model from the case's conditions only; it never reads
the observed figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pdctl.capacity import instance_memory, model_config
from pdctl.capacity.fit import Shape
from pdctl.capacity.gpus import GIB, find_gpu
from pdctl.capacity.memory import tokens_in
from pdctl.capacity.models import BUILTIN
from pdctl.spec.speculative import Speculative


@dataclass(frozen=True)
class Log:
    name: str
    url: str
    version: str  # the vLLM version the log came from ("0.7" = the V0 engine)
    gpu: str
    model: str
    tp: int = 1
    pp: int = 1
    util: float = 0.9
    max_model_len: int | None = None
    kv_cache_dtype: str = "auto"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool = False
    flashinfer: bool | None = None  # the log said FlashInfer sampled (None: not said)
    total_gib: float | None = None  # CUDA's total as the log printed it
    config: dict[str, Any] | None = None  # HF config values when the name is not built in
    # observed (None: the log did not print it)
    weights_gib: float | None = None
    activation_gib: float | None = None
    non_torch_gib: float | None = None
    kv_gib: float | None = None
    tokens: int | None = None
    # --speculative-config's method, num_speculative_tokens, model; "draft": the draft's
    # config.json values (pdctl's speculative.config)
    speculative: dict[str, Any] | None = None
    fits: bool = True  # vLLM started (False: it refused: no memory for one request)
    used_gib: float = 0.0  # memory other processes held on the GPU, where the reporter said
    kind: str = ""
    split: str = "tune"
    e2e: bool = True
    note: str = ""
    tags: tuple[str, ...] = field(default=())

    @property
    def v1(self) -> bool:
        major, minor = (int(x) for x in self.version.split(".")[:2])
        return (major, minor) >= (0, 8)


def load() -> tuple[dict[str, dict[str, Any]], tuple[Log, ...]]:
    """(config name -> HF config values, the cases) of tests/fixtures/capacity/vllm_logs.yaml."""
    path = Path(__file__).resolve().parents[1] / "fixtures" / "capacity" / "vllm_logs.yaml"
    doc = yaml.safe_load(path.read_text())
    configs = {name: {**BUILTIN[c.pop("builtin")], **c} for name, c in doc["configs"].items()}
    logs = []
    for case in doc["logs"]:
        case["tags"] = tuple(case.get("tags", ()))
        if "config" in case:
            case["config"] = configs[case["config"]]
        logs.append(Log(**case))
    return configs, tuple(logs)


CONFIGS, LOGS = load()


def shape(log: Log) -> Shape:
    return Shape(
        tp=log.tp, pp=log.pp, kv_cache_dtype=log.kv_cache_dtype, max_model_len=log.max_model_len,
        max_num_seqs=log.max_num_seqs, max_num_batched_tokens=log.max_num_batched_tokens,
        enforce_eager=log.enforce_eager, gpu=log.gpu, engine=log.version,
        flashinfer_sampler=log.flashinfer, speculative=_speculative(log.speculative),
    )


def _speculative(given: dict[str, Any] | None) -> Speculative | None:
    """The spec section a user would write for the log's --speculative-config."""
    if given is None:
        return None
    s = Speculative(method=given["method"], model=given.get("model"),
                    num_speculative_tokens=given["num_speculative_tokens"])
    s._draft = given.get("draft")
    return s


def total_bytes(log: Log) -> int:
    if log.total_gib is not None:
        return int(log.total_gib * GIB)
    return find_gpu(log.gpu).usable_bytes


@dataclass(frozen=True)
class Prediction:
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    graphs_gib: float
    kv_gib: float
    tokens: int
    fits: bool


def predict(log: Log) -> Prediction:
    """pdctl's end-to-end prediction from the log's conditions only."""
    model = model_config(log.model, log.config)
    mem = instance_memory(model, total_bytes(log), log.util, shape(log), int(log.used_gib * GIB))
    g = GIB
    return Prediction(
        mem.weights / g, mem.overhead.activation / g, mem.overhead.non_torch / g,
        mem.overhead.cuda_graphs / g, mem.kv_available / g, mem.kv_tokens, mem.fits,
    )


def token_error(log: Log, p: Prediction) -> float | None:
    """Per cent error of the printed KV tokens (None where not printed; a refusal prints
    them too: 'the maximum number of tokens that can be stored in KV cache (N)')."""
    if log.tokens is None:
        return None
    return (p.tokens - log.tokens) / log.tokens * 100


def kv_error(log: Log, p: Prediction) -> float | None:
    """Per cent error of the printed 'Available KV cache memory' (None where not printed or
    tiny: a near-zero or negative figure makes a percentage meaningless)."""
    if log.kv_gib is None or log.kv_gib < 0.5:
        return None
    return (p.kv_gib - log.kv_gib) / log.kv_gib * 100


def bytes_per_token_tokens(log: Log) -> int | None:
    """Tokens predicted from the log's OWN available memory (checks the KV layout only)."""
    if log.kv_gib is None or log.tokens is None:
        return None
    mem = instance_memory(model_config(log.model, log.config), 80 * GIB, 0.9, shape(log))
    if mem.layout is not None:
        return mem.layout.tokens(int(log.kv_gib * GIB), mem.max_model_len)
    return tokens_in(int(log.kv_gib * GIB), mem.kv_per_token, mem.block_size)
