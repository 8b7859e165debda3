"""Read vLLM's start-up lines from a log and compare them with pdctl's prediction, per term.

`parse_log(text)` is pure (the CLI reads the file). It understands the V1 lines
(`Model loading took`, `Available KV cache memory`, `GPU KV cache size`, `Maximum concurrency`,
`Estimated CUDA graph memory`, `Graph capturing finished ... took`, the engine config line) and
the older V0 ones
(`Loading model weights took`, `Memory profiling ...` summaries, `# GPU blocks`). With several
workers vLLM sizes the cache by the smallest figure, so the smallest "Available" is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pdctl.capacity.fit import instance_memory
from pdctl.capacity.gpus import GIB
from pdctl.capacity.memory import tokens_in
from pdctl.capacity.models import builtin_config, normalize
from pdctl.capacity.profile import flashinfer_only

if TYPE_CHECKING:
    from pdctl.capacity.report import CapacityPlan

_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"


def _f(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass(frozen=True)
class Observed:
    """What a vLLM start-up log printed (GiB as printed; None where the log has no line)."""

    version: str | None = None
    model: str | None = None
    tp: int | None = None
    pp: int | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str | None = None
    enforce_eager: bool | None = None
    util: float | None = None
    total_gib: float | None = None
    weights_gib: float | None = None
    activation_gib: float | None = None
    non_torch_gib: float | None = None
    graphs_gib: float | None = None  # the profiler's estimate (counted before the KV cache)
    graphs_actual_gib: float | None = None  # "Graph capturing finished ... took"
    kv_available_gib: float | None = None
    kv_tokens: int | None = None  # "GPU KV cache size": vLLM's count (concurrency x length)
    max_concurrency: float | None = None  # "Maximum concurrency for L tokens per request"
    block_size: int | None = None
    flashinfer_sampler: bool | None = None  # "Using FlashInfer for top-p & top-k sampling."

    @property
    def empty(self) -> bool:
        return self.kv_available_gib is None and self.kv_tokens is None and self.weights_gib is None


_PATTERNS: tuple[tuple[str, str], ...] = (
    ("weights_gib", r"(?:Model loading took|Loading model weights took) " + _NUM + r" ?Gi?B"),
    ("kv_available_gib", r"Available KV cache memory: " + _NUM + r" ?GiB"),
    ("kv_tokens", r"GPU KV cache size: " + _NUM + r" tokens"),
    ("max_concurrency", r"Maximum concurrency for [0-9,]+ tokens per request: " + _NUM + r" ?x"),
    ("graphs_gib", r"Estimated CUDA graph memory: " + _NUM + r" ?GiB"),
    ("graphs_actual_gib", r"Graph capturing finished in [0-9.]+ secs?, took " + _NUM + r" ?GiB"),
    ("total_gib", r"total_gpu_memory(?: \(|=)" + _NUM + r" ?GiB"),
    ("util", r"gpu_memory_utilization(?: \(|=|': )" + _NUM),
    ("non_torch_gib", r"non_torch_memory(?: takes |=)" + _NUM + r" ?GiB"),
    ("activation_gib", r"PyTorch activation peak memory takes " + _NUM + r" ?GiB"),
    (
        "kv_available_gib",
        r"(?:the rest of the memory reserved for KV Cache is|kv_cache_size=) ?" + _NUM + r" ?GiB",
    ),
    ("total_gib", r"Free memory on device \([0-9.]+/" + _NUM + r" ?GiB\)"),
    ("util", r"Desired GPU memory utilization is \(" + _NUM),
    ("activation_gib", _NUM + r" ?GiB for peak activation"),
    ("graphs_gib", _NUM + r" ?GiB for CUDAGraph memory"),
    ("activation_gib", r"torch peak memory increase:? " + _NUM + r" ?GiB"),
    ("non_torch_gib", r"non-torch forward increase memory:? " + _NUM + r" ?GiB"),
    ("version", r"Initializing an? (?:V[01] )?LLM engine \(v([0-9][^)]*)\)"),
    ("version", r"[ \u2580-\u259f]version (\d+\.\d+[0-9a-z.+]*)"),
    ("version", r"vLLM API server version ([0-9][0-9a-z.+]*)"),
    ("model", r"with config: model='([^']+)'"),
    ("model", r"non-default args: \{[^}]*'model': '([^']+)'"),
    ("tp", r"tensor_parallel_size=([0-9]+)"), ("tp", r"'tensor_parallel_size': ([0-9]+)"),
    ("pp", r"pipeline_parallel_size=([0-9]+)"), ("pp", r"'pipeline_parallel_size': ([0-9]+)"),
    ("max_model_len", r"max_seq_len=([0-9]+)"), ("max_model_len", r"Using max model len ([0-9]+)"),
    ("max_model_len", r"'max_model_len': ([0-9]+)"),
    ("max_num_batched_tokens", r"max_num_batched_tokens=([0-9]+)"),
    ("max_num_batched_tokens", r"'max_num_batched_tokens': ([0-9]+)"),
    ("kv_cache_dtype", r"kv_cache_dtype=([a-z0-9_]+)"),
    ("kv_cache_dtype", r"'kv_cache_dtype': '([a-z0-9_]+)'"),
    ("enforce_eager", r"enforce_eager=(True|False)"),
    ("enforce_eager", r"'enforce_eager': (True|False)"),
    ("block_size", r"Block size is set to ([0-9]+)"),
)
_INTS = {"kv_tokens", "tp", "pp", "max_model_len", "max_num_batched_tokens", "block_size"}
# several workers: vLLM uses the smallest
_MIN = {"kv_available_gib", "kv_tokens", "max_concurrency"}
_BLOCKS = re.compile(r"(?:GPU|cuda) blocks: ([0-9]+)")
# which top-k/top-p sampler the engine set up (vllm/v1/sample/ops/topk_topp_sampler.py)
_FLASHINFER_ON = re.compile(r"Using FlashInfer for top-p & top-k sampling")
_FLASHINFER_OFF = re.compile(
    r"FlashInfer is not available|FlashInfer is available, but it is not enabled"
)


def parse_log(text: str) -> Observed:
    """The start-up figures of a vLLM log (see module doc)."""
    found: dict[str, Any] = {}
    for field, pattern in _PATTERNS:
        for match in re.finditer(pattern, text):
            raw = match.group(1)
            value: Any
            if field in _INTS:
                value = int(_f(raw))
            elif field == "enforce_eager":
                value = raw == "True"
            elif field in ("version", "model", "kv_cache_dtype"):
                value = raw
            else:
                value = _f(raw)
            if field in _MIN and field in found:
                found[field] = min(found[field], value)
            elif field in ("weights_gib", "graphs_gib") and field in found:
                found[field] = max(found[field], value)  # the most loaded worker
            elif field not in found:
                found[field] = value
    if _FLASHINFER_ON.search(text):
        found["flashinfer_sampler"] = True
    elif _FLASHINFER_OFF.search(text):
        found["flashinfer_sampler"] = False
    if "kv_tokens" not in found and (blocks := _BLOCKS.search(text)):
        found["kv_tokens"] = int(blocks.group(1)) * found.get("block_size", 16)
    return Observed(**found)


@dataclass(frozen=True)
class Term:
    """One memory term: pdctl's prediction and the log's figure (bytes; None if not printed)."""

    name: str
    predicted: float
    observed: float | None
    unit: str = "GiB"

    @property
    def error_pct(self) -> float | None:
        if self.observed is None or self.observed == 0:
            return None
        return (self.predicted - self.observed) / self.observed * 100


def _rounded(value: float, unit: str) -> float | int:
    """GiB and concurrency (x) to 0.01, tokens whole."""
    return round(value, 2) if unit in ("GiB", "x") else int(value)


def other_model(planned: str, logged: str | None) -> bool | None:
    """Whether the log's model (`with config: model=...`, or 'model' of its non-default args:
    a name or a local path) is another model than the plan's: True when both normalise to
    different names and one is in pdctl's table (a known model, or a different size of
    one), or neither name contains the other; None when the log names none."""
    if not logged:
        return None
    ours, theirs = normalize(planned), normalize(logged)
    if ours == theirs:
        return False
    if builtin_config(logged) is not None or builtin_config(planned) is not None:
        return True  # a known model's name differs: another model (or another size)
    return ours not in theirs and theirs not in ours


def compare(plan: CapacityPlan, seen: Observed, role: str | None = None) -> dict[str, Any]:
    """Predicted vs observed per term, predicted under the LOG's conditions (TP, PP,
    max-model-len, util, KV dtype, eager, batched tokens and CUDA's total when printed), so
    the terms compare like with like; `conditions` lists where the log differs from the plan.
    """
    chosen = next((r for r in plan.roles if r.role == role), None) or next(
        (r for r in plan.roles if seen.tp is not None and r.shape.tp == seen.tp), plan.roles[0]
    )
    shape, util = chosen.shape, chosen.util
    total = chosen.memory.total
    changes: list[str] = []

    def differs(label: str, ours: Any, theirs: Any) -> bool:
        if theirs is not None and theirs != ours:
            changes.append(f"{label}: plan {ours}, log {theirs}")
            return True
        return False

    if seen.version and differs("vLLM", shape.engine, seen.version):
        shape = replace(shape, engine=seen.version)
    if differs("tensorParallel", shape.tp, seen.tp):
        shape = replace(shape, tp=seen.tp or 1)
    if differs("pipelineParallel", shape.pp, seen.pp):
        shape = replace(shape, pp=seen.pp or 1)
    if differs("maxModelLen", chosen.memory.max_model_len, seen.max_model_len):
        shape = replace(shape, max_model_len=seen.max_model_len)
    if seen.kv_cache_dtype and differs("kvCacheDtype", shape.kv_cache_dtype, seen.kv_cache_dtype):
        shape = replace(shape, kv_cache_dtype=seen.kv_cache_dtype)
    if differs("enforceEager", shape.enforce_eager, seen.enforce_eager):
        shape = replace(shape, enforce_eager=bool(seen.enforce_eager))
    if seen.max_num_batched_tokens and differs(
        "maxNumBatchedTokens", shape.batching(total)[0], seen.max_num_batched_tokens
    ):
        shape = replace(shape, max_num_batched_tokens=seen.max_num_batched_tokens)
    if seen.flashinfer_sampler is not None:
        plan_fi = flashinfer_only(shape.engine, shape.flashinfer_sampler)
        shape = replace(shape, flashinfer_sampler=seen.flashinfer_sampler)
        log_fi = flashinfer_only(shape.engine, shape.flashinfer_sampler)
        words = {True: "FlashInfer only", False: "sorted (no FlashInfer)"}
        if plan_fi != log_fi:
            changes.append(f"sampler profile: plan {words[plan_fi]}, log {words[log_fi]}")
    if seen.util is not None and differs("gpuMemoryUtilization", util, seen.util):
        util = seen.util
    if seen.total_gib is not None and abs(seen.total_gib * GIB - total) > 0.01 * GIB:
        changes.append(f"CUDA total: plan {total / GIB:.2f} GiB, log {seen.total_gib:.2f} GiB")
        total = int(seen.total_gib * GIB)
    mem = instance_memory(plan.model, total, util, shape)
    g = GIB
    terms = [
        Term("weights", mem.weights / g, seen.weights_gib),
        Term("activation (profile peak)", mem.overhead.activation / g, seen.activation_gib),
        Term("non-torch (context, NCCL)", mem.overhead.non_torch / g, seen.non_torch_gib),
        Term("CUDA graphs", mem.overhead.cuda_graphs / g, seen.graphs_gib),
        Term("KV cache memory", mem.kv_available / g, seen.kv_available_gib),
        # like with like: vLLM's own count (concurrency at max_model_len x max_model_len),
        # never the tokens the pool stores at once (kvTokenSlots), which vLLM does not print
        Term(
            "KV cache size (vLLM's count)", float(mem.kv_tokens),
            None if seen.kv_tokens is None else float(seen.kv_tokens), "tokens",
        ),
        Term("concurrency at maxModelLen", mem.concurrency, seen.max_concurrency, "x"),
    ]
    pinned = None
    if seen.kv_available_gib is not None:
        # what the observed KV memory holds under the plan's own shape (pin it: set the
        # util that gives this memory, or compare with the plan's own figure)
        kv = int(seen.kv_available_gib * g)
        planned = chosen.memory
        held = (
            planned.layout.tokens(kv, planned.max_model_len)
            if planned.layout is not None
            else tokens_in(kv, planned.kv_per_token, planned.block_size)
        )
        pinned = {
            "kvAvailableGib": seen.kv_available_gib, "kvTokens": held,
            "kvTokenSlots": planned.layout.slots(kv) if planned.layout is not None else held,
            "fits": kv >= planned.kv_per_sequence,
        }
    # another model's figures are no measure of this prediction: no error per term
    other = other_model(plan.model.name, seen.model)
    if other:
        changes.insert(0, f"model: plan {plan.model.name}, log {seen.model}")
    return {
        "role": chosen.role, "version": seen.version, "model": seen.model,
        "planModel": plan.model.name, "otherModel": other, "conditions": changes,
        "terms": [
            {
                "term": t.name, "unit": t.unit, "predicted": _rounded(t.predicted, t.unit),
                "observed": None if t.observed is None else _rounded(t.observed, t.unit),
                "errorPct": None if t.error_pct is None or other else round(t.error_pct, 1),
            }
            for t in terms
        ],
        "graphsCapturedGib": seen.graphs_actual_gib, "observedUnderPlan": pinned,
    }
