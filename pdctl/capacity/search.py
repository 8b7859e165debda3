"""Which engine settings serve a load best (issue 35 item 4), from the spec alone: the spec's own
settings and single changes to them (max-num-seqs, max-num-batched-tokens, KV cache dtype,
gpu-memory-utilization), each planned (memory: its KV tokens) and run through the speed model
at the load (pdctl.capacity.atload), ranked by goodput: the requests per second that meet the
workload's TTFT and TPOT targets. Pure: the caller passes `plan_of`, which turns a spec into its
CapacityPlan (the CLI reads files for that).

The role searched is the one whose engines hold the batch: `serve` (phases 0 and 1) or
`decode` (P/D). Candidates that equal the spec's own value are left out. An fp8 KV cache
changes the numerics (vLLM's per-tensor scales): it is offered, marked so, never silently
chosen over an equal bf16 one. Eager mode is not a candidate: it only ever costs speed.
docs/speed.md#choosing-engine-settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pdctl.capacity.atload import LoadSpec, predict

# (label, section field or model field, value); model fields are marked "model."
CANDIDATES: tuple[tuple[str, str, Any], ...] = (
    ("--max-num-seqs 64", "max_num_seqs", 64),
    ("--max-num-seqs 128", "max_num_seqs", 128),
    ("--max-num-seqs 256", "max_num_seqs", 256),
    ("--max-num-seqs 512", "max_num_seqs", 512),
    ("--max-num-batched-tokens 2048", "max_num_batched_tokens", 2048),
    ("--max-num-batched-tokens 4096", "max_num_batched_tokens", 4096),
    ("--max-num-batched-tokens 16384", "max_num_batched_tokens", 16384),
    ("--gpu-memory-utilization 0.95", "gpu_memory_utilization", 0.95),
    ("--kv-cache-dtype fp8", "model.kv_cache_dtype", "fp8"),
)
AS_SPEC = "as the spec"
NUMERICS = "--kv-cache-dtype fp8"  # the one candidate that changes the model's numerics


@dataclass(frozen=True)
class Tried:
    """One candidate: its flags, what the speed model predicts at the load (atload.predict's
    figures), its goodput (requests/s meeting the SLOs; None where a role does not fit)."""

    label: str
    figures: dict[str, Any] | None
    goodput: float | None
    note: str = ""


def change_of(label: str) -> tuple[str, Any] | None:
    """The spec field (snake_case, "model." for the model section) and value a candidate's
    label sets; None for the spec's own settings."""
    return next(((field, value) for name, field, value in CANDIDATES if name == label), None)


def variants(spec: Any) -> list[tuple[str, Any]]:
    """(label, spec) for the spec's own settings and each single change to its batch role."""
    role = "decode" if spec.disaggregated else "serve"
    section = getattr(spec, role)
    if section is None:  # a spec without `serve:` runs one engine with its defaults
        from pdctl.spec.model import Serve

        section = Serve()
    out: list[tuple[str, Any]] = [(AS_SPEC, spec)]
    for label, field, value in CANDIDATES:
        if field.startswith("model."):
            name = field.removeprefix("model.")
            if getattr(spec.model, name) == value:
                continue
            out.append((label, spec.model_copy(
                update={"model": spec.model.model_copy(update={name: value})})))
            continue
        current = getattr(section, field)
        if current == value or (field == "gpu_memory_utilization" and (current or 0.9) >= value):
            continue
        changed = section.model_copy(update={field: value})
        out.append((label, spec.model_copy(update={role: changed})))
    return out


def search(spec: Any, plan_of: Callable[[Any], Any], load: LoadSpec,
           scale: tuple[float, float] = (1.0, 1.0)) -> list[Tried]:
    """Every variant of `spec` planned by `plan_of` and predicted at `load`, best goodput
    first (the spec's own settings win ties; fp8 KV only wins by more than 2%). `scale`: what
    a bench measured over what the model predicted for the spec's own settings (TTFT, TPOT):
    the targets are held against the model's figures times these (`pdctl tune`)."""
    tried = []
    for label, variant in variants(spec):
        plan = plan_of(variant)
        if not plan.fits:
            tried.append(Tried(label, None, None, "does not fit"))
            continue
        t = plan.traffic
        ttft = t.ttft_ms / scale[0] if t.ttft_ms is not None else None
        tpot = t.tpot_ms / scale[1] if t.tpot_ms is not None else None
        figures = predict(plan, load, ttft, tpot)
        good = (figures.get("goodput") or {}).get("requestsPerSecond")
        tried.append(Tried(label, figures, good, "changes numerics" if label == NUMERICS else ""))

    def key(x: Tried) -> tuple[float, int]:
        g = x.goodput if x.goodput is not None else -1.0
        if x.label == NUMERICS:
            g /= 1.02
        return (-g, 0 if x.label == AS_SPEC else 1)

    return sorted(tried, key=key)


def ranking(tried: list[Tried], load: LoadSpec) -> dict[str, Any]:
    """`plan --search -o json`: the ranking and the pick."""
    rows = []
    for t in tried:
        f = t.figures or {}
        rows.append({
            "settings": t.label, "goodputRequestsPerSecond": t.goodput,
            "ttftMs": f.get("ttftMs"), "tpotMs": f.get("tpotMs"),
            "requestThroughput": f.get("requestThroughput"),
            "outputThroughput": f.get("outputThroughput"), "note": t.note,
        })
    return {"load": load.label, "ranked": rows, "recommended": tried[0].label if tried else None}
