"""What speculative decoding and KV offloading do to the plan: the host memory that
`engine.kvOffload` takes per host, and a note where a draft model's memory is not counted
(docs/capacity.md#speculative-decoding-and-kv-offloading).

Each engine core allocates the offload tier for its size (vLLM's `kv_offloading_size` is the
engine's, all TP ranks together: vllm/config/cache.py, 0.23.0 l.168-172), its TP ranks each
holding a share (CPUOffloadingSpec `cpu_page_size_per_worker`, vllm/v1/kv_offload/cpu/
spec.py); every data-parallel rank is an engine core of its own. So a node of an instance
spanning `nodes` hosts with `dataParallel` ranks holds size x dataParallel / nodes."""

from __future__ import annotations

from typing import Any

from pdctl.capacity.speculative import Draft, draft_of
from pdctl.errors import PdctlError
from pdctl.plan import make_plan
from pdctl.plan.kube_checks import amount
from pdctl.spec.model import Spec


def _text(gib: float) -> str:
    return f"{gib:.2f}".rstrip("0").rstrip(".")


def offload_host_gib(spec: Spec) -> dict[str, float] | None:
    """GiB of host memory per host for offloaded KV (None: Kubernetes, where each pod holds
    its own; empty: the spec does not place its engines)."""
    off = spec.engine.kv_offload
    if off is None:
        return None
    try:
        from pdctl.plan import make_plan

        plan = make_plan(spec)
    except PdctlError:
        return {}  # the spec does not place (yet): `validate` says why
    if plan.on_kubernetes:
        return None
    sections = {"serve": spec.serve, "prefill": spec.prefill, "decode": spec.decode}
    out: dict[str, float] = {}
    for inst in plan.instances:
        section = sections.get(inst.role)
        if section is None:
            continue
        dp = max(1, getattr(section, "data_parallel", 1))
        nodes = max(1, getattr(section, "nodes", 1))
        for node in (inst, *inst.workers):
            if node.host is not None:
                name = node.host.name
                out[name] = out.get(name, 0.0) + off.size_gib * dp / nodes
    return out


def _pod_limits(spec: Spec, size_gib: float) -> tuple[str, ...]:
    """Engine pods whose memory limit the offload tier alone fills: the kernel kills them."""
    try:
        pods = make_plan(spec).pods
    except PdctlError:
        return ()
    out = []
    for role, pod in pods:
        section = {"serve": spec.serve, "prefill": spec.prefill, "decode": spec.decode}.get(role)
        if section is None:
            continue
        res = pod.resources
        limit = (res.limits.memory if res.limits and res.limits.memory else None) or res.memory
        need = size_gib * max(1, getattr(section, "data_parallel", 1)) * 2**30
        if amount(limit) <= need:
            out.append(
                f"{role}: its pods' memory limit {limit} leaves no room beyond the "
                f"{_text(size_gib)} GiB KV offload tier (engine.kvOffload.sizeGib): the kernel "
                "would kill the engine (OOM); raise kubernetes.resources.memory (and "
                "limits.memory) above it"
            )
    return tuple(out)


def offload_notes(spec: Spec) -> tuple[str, ...]:
    """One line for `pdctl plan`: the host memory KV offloading takes, per host."""
    off = spec.engine.kv_offload
    if off is None:
        return ()
    head = (
        f"engine.kvOffload ({off.backend}): {_text(off.size_gib)} GiB of host memory per "
        "engine (per data-parallel rank) for offloaded KV blocks"
    )
    per_host = offload_host_gib(spec)
    if per_host is None:
        return (
            f"{head}; on Kubernetes each engine pod holds it within its memory limit",
            *_pod_limits(spec, off.size_gib),
        )
    if not per_host:
        return (head,)
    hosts = ", ".join(f"{h} {_text(g)} GiB" for h, g in sorted(per_host.items()))
    return (f"{head}; per host: {hosts}",)


def speculative_notes(spec: Spec, model: Any = None) -> tuple[str, ...]:
    """Per role with a draft: whether its weights and KV layers are counted (capacity.
    speculative: MTP layers from the target's config, a draft in the model table) or not.

    vLLM loads the draft beside the target before it profiles memory, and its attention layers
    get KV cache like the target's (the KV cache config is built from every attention layer
    of the model runner, draft included: vllm/v1/worker/gpu_model_runner.py
    `get_kv_cache_spec`)."""
    out = []
    for role in ("serve", "prefill", "decode"):
        section = getattr(spec, role, None)
        s = getattr(section, "speculative", None)
        if s is None or s.method == "ngram":  # ngram: no draft model, no extra memory
            continue
        what = "MTP layers" if s.method == "mtp" else f"draft ({s.model})"
        found: Draft | str = "the target model's config is not known"
        if model is not None:
            found = draft_of(
                s, model, getattr(section, "tensor_parallel", 1), spec.model.dtype,
                spec.model.kv_cache_dtype,
            )
        if isinstance(found, Draft):
            out.append(
                f"{role}.speculative ({s.method}): counted: the {found.what}, "
                f"{found.weights / 2**30:.2f} GiB of weights and {found.layers} KV layer(s) per "
                "GPU (docs/capacity.md#speculative-decoding-and-kv-offloading)"
            )
            continue
        out.append(
            f"{role}.speculative ({s.method}): the {what} weights and KV layers are not "
            f"counted ({found}): vLLM holds fewer KV tokens than shown (docs/capacity.md"
            "#speculative-decoding-and-kv-offloading)"
        )
    return tuple(out)


def offload_cache_notes(spec: Spec, roles: tuple[Any, ...]) -> tuple[str, ...]:
    """How many more prefix tokens the native offload tier of one engine keeps (per role).

    vLLM's CPUOffloadingSpec (vllm/v1/kv_offload/cpu/spec.py, 0.23.0 l.27-60): an offloaded
    block is one GPU block of every layer on every rank of the engine (`kv_bytes_per_block` =
    a worker's KV bytes per block x world_size; pdctl sets no `block_size`, so one GPU block),
    and the tier holds cpu_bytes_to_use // that many blocks. `roles`: report.RolePlan items."""
    off = spec.engine.kv_offload
    if off is None or off.backend != "native":
        return ()
    out = []
    for r in roles:
        mem = r.memory
        if getattr(mem.layout, "linear_layers", 0) or getattr(mem.layout, "sliding_layers", 0):
            out.append(
                f"{r.role}: engine.kvOffload's extra cached tokens are not computed for "
                "sliding-window or hybrid models (their blocks differ per layer group)"
            )
            continue
        world = r.shape.tp * r.shape.pp
        block = mem.block_size * mem.kv_per_token_all_layers * world
        if block <= 0:
            continue
        tokens = int(off.size_gib * 2**30) // block * mem.block_size
        on_gpu = max(1, mem.kv_tokens)
        out.append(
            f"{r.role}: engine.kvOffload keeps about {tokens:,} more prefix tokens per engine in "
            f"host memory ({_text(off.size_gib)} GiB / {block // mem.block_size:,} bytes a token "
            f"over its {world} GPU(s); {tokens / on_gpu:.1f}x its GPU KV cache)"
        )
    return tuple(out)
