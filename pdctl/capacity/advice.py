"""Honest advice on packing decode instances on one GPU, from our H200 measurement.

tests/fixtures/gpu/vllm023-h200: decode engines of one model in slices of one H200 time-slice
it. Two real vLLM engines at batch 64 each gave 0.94x the tokens/s of ONE engine at batch 64,
and 0.58x of one engine at batch 128. So a second copy of the same model adds no throughput to
a busy GPU: raise --max-num-seqs in one instance first. Packing pays only when one instance
cannot fill its batch: too little traffic, or several different models (or adapters) sharing a GPU.
When the KV cache is what caps the batch, a second copy makes it worse (it halves the KV and
duplicates the weights).
"""

from __future__ import annotations

from dataclasses import dataclass

from pdctl.capacity.roofline import TIME_SLICE_EFFICIENCY

PACKED_VS_DOUBLE_BATCH = 0.58  # 2 engines at B each vs 1 engine at 2B (7,595 vs 13,094 at B 64)
BUSY = 0.8  # demand at or above this share of one instance's batch counts as busy
LOW = 0.5  # demand below this share leaves one instance mostly idle


@dataclass(frozen=True)
class Advice:
    """case: busy | low-traffic | kv-limited | moderate | unknown-traffic | tpot-not-met |
    does-not-fit; pack: packing pays here."""

    case: str
    pack: bool
    lines: tuple[str, ...]


def _seqs_line(batch: int, max_num_seqs: int | None) -> str:
    """What to do with --max-num-seqs for a wanted `batch`: raise it only when it is lower."""
    if max_num_seqs is None:
        return f"let --max-num-seqs allow {batch} in one instance"
    if max_num_seqs < batch:
        return f"raise --max-num-seqs from {max_num_seqs} to {batch} in one instance"
    return f"--max-num-seqs {max_num_seqs} already allows it"


def packing_advice(
    kv_batch: int, target_batch: int, demand: float | None, per_gpu: int = 1,
    max_num_seqs: int | None = None, why: str = "the GPU turns compute-bound there",
    whole_gpu: bool = False,
) -> Advice:
    """Advice for one decode instance that could run on a whole GPU.

    kv_batch: sequences of the workload's context the KV cache of ONE instance on the whole
    GPU holds; target_batch: the batch worth running (the roofline ridge, where the GPU turns
    compute-bound, or what the TPOT target allows; `why` says which); demand: sequences
    decoding at once (Little's law: rate x output tokens x TPOT), or None; per_gpu: decode
    instances the spec packs on one GPU; max_num_seqs: the instance's --max-num-seqs (None:
    not known); whole_gpu: kv_batch is of one instance on a whole GPU, not the spec's own
    (a HAMi slice's). "Raise --max-num-seqs" is said only when it is below the batch worth
    running.
    """
    measured = (
        f"measured on an H200: 2 co-located decode processes at batch B give "
        f"{TIME_SLICE_EFFICIENCY:.2f}x the tokens/s of one at B and {PACKED_VS_DOUBLE_BATCH:.2f}x "
        "of one at 2B (they time-slice the GPU)"
    )
    batch = min(kv_batch, target_batch)
    seqs = "" if max_num_seqs is None else f", --max-num-seqs {max_num_seqs}"
    holds = "on a whole GPU would hold" if whole_gpu else "holds"
    lines: list[str] = []
    if kv_batch < target_batch and (demand is None or demand > kv_batch):
        lines.append(
            f"kv-limited: the KV cache {holds} {kv_batch} sequences of this context, below the "
            f"batch of {target_batch} worth running ({why}); a second copy of the model on "
            "this GPU would halve the KV again and duplicate the weights, so do not pack it; "
            "`--kv-cache-dtype fp8` doubles the sequences, a larger TP or GPU adds KV; "
            "only a different, smaller model gains from the idle compute"
        )
        lines.append(measured)
        return Advice("kv-limited", False, tuple(lines))
    if demand is None:
        lines.append(
            f"no traffic given (set workload.requestsPerSecond): one instance's KV {holds} "
            f"{kv_batch} sequences of this context{seqs}; batches beyond about "
            f"{target_batch} add little ({why}), so one instance can keep the GPU busy: "
            f"{_seqs_line(batch, max_num_seqs)}; add GPUs rather than copies on one GPU"
        )
        lines.append(measured)
        if per_gpu > 1:
            lines.append(
                f"decode.share.perGpu={per_gpu}: worth it only if each instance cannot fill "
                f"its batch (low traffic, or different models per slice)"
            )
        return Advice("unknown-traffic", False, tuple(lines))
    if demand >= BUSY * batch:
        lines.append(
            f"busy: about {demand:.0f} sequences decode at once, one instance batches {batch} "
            f"usefully (its KV {holds} {kv_batch}; worth running: {target_batch}, {why}{seqs}); "
            "do not pack: "
            f"{_seqs_line(batch, max_num_seqs)}, one instance per GPU, and add GPUs for the "
            "rest"
        )
        lines.append(measured)
        if per_gpu > 1:
            lines.append(
                f"decode.share.perGpu={per_gpu} packs copies of one busy model: expect about "
                f"{PACKED_VS_DOUBLE_BATCH:.2f}x the tokens/s of one instance with their "
                "combined batch; use perGpu 1"
            )
        return Advice("busy", False, tuple(lines))
    if demand < LOW * batch:
        lines.append(
            f"low-traffic: only about {demand:.1f} sequences decode at once while one instance "
            f"could batch {batch}; the GPU idles, so packing pays: give this decode a slice "
            "sized for its demand and let other models (or adapters) use the rest"
        )
        lines.append(
            "packing several copies of THIS model adds no throughput (they split the same "
            "traffic); pack different models, one spec each with decode.share"
        )
        lines.append(measured)
        return Advice("low-traffic", True, tuple(lines))
    lines.append(
        f"moderate: about {demand:.0f} of {batch} batch slots in use; one instance per GPU "
        "still gives the most tokens/s; packing pays only for different models"
    )
    lines.append(measured)
    return Advice("moderate", False, tuple(lines))


def unmet_tpot_advice(tpot_ms: float, batch1_ms: float, where: str) -> Advice:
    """No batch meets the TPOT target: even one sequence's decode step is slower."""
    return Advice(
        "tpot-not-met", False,
        (
            f"TPOT target {tpot_ms:g} ms NOT met: even one sequence takes {batch1_ms:.2f} ms "
            f"per token on {where}; no batch size or packing helps: more tensorParallel "
            "(each GPU reads less of the weights), a GPU with more HBM bandwidth, or a "
            "smaller or quantized model",
        ),
    )


def unfit_advice(roles: tuple[str, ...]) -> Advice:
    """A role that does not fit gets no speed, P:D or packing advice (its KV is zero)."""
    names = " and ".join(roles)
    return Advice(
        "does-not-fit", False,
        (
            f"{names} does not fit, so vLLM would not start it: no speed, P:D or packing "
            "advice until it does; first apply a fix listed above (a nearest fit, or a "
            "warning's fix)",
        ),
    )
