"""Verdicts: one line each, pure functions of a Window, naming the figures and thresholds.

THRESHOLDS is the one table (docs/top.md prints it). The decode advice follows the H200
measurements (tests/fixtures/gpu/vllm023-h200/README.md): co-located decode engines of one
model time-slice the GPU (N engines at batch B give 0.94x of ONE at batch B per GPU), so
packing pays only when one instance cannot fill its batch; a single engine at twice the batch
gave 1.6x."""

from __future__ import annotations

from dataclasses import dataclass

from pdctl.capacity.roofline import TIME_SLICE_EFFICIENCY
from pdctl.top.gpu import GpuLoad, kind
from pdctl.top.kv_events import KvEvent, counter_events, pair_of, summary
from pdctl.top.packing import Packing
from pdctl.top.router_verdict import router_verdicts
from pdctl.top.window import Figures, Window, role_totals

THRESHOLDS: dict[str, tuple[float, str]] = {
    "gpu_idle_max": (5.0, "SM activity and DRAM bandwidth % at or below: the GPU is idle"),
    "bandwidth_bound_min": (60.0, "DRAM bandwidth % at or above: bandwidth-bound"),
    "tensor_idle_max": (30.0, "tensor-pipe % at or below (with high DRAM): SMs mostly idle"),
    "compute_tensor_min": (60.0, "tensor-pipe % at or above: compute-bound"),
    "kv_low_max": (0.5, "KV-cache usage at or below: room for a larger batch"),
    "kv_full_min": (0.9, "KV-cache usage at or above: near full"),
    "batch_full_ratio": (0.9, "running / max-num-seqs at or above: the batch is full"),
    "itl_spread_min": (2.0, "ITL p95 / p50 at or above: decode steps are being delayed"),
    "prompt_heavy_ratio": (1.0, "prompt tok/s / generation tok/s at or above: prefill-heavy"),
    "queue_min": (2.0, "requests waiting at or above: a queue"),
    "fallback_share_min": (
        0.5,
        "decode's computed share of its uncached prompt tokens (computed + received over the "
        "connector) at or above: KV transfer not working",
    ),
    "pack_max": (4.0, "most decode instances pdctl suggests per GPU (phase 3)"),
    "router_error_share_min": (
        0.01, "router errors / requests through the router at or above: requests are failing",
    ),
    "route_skew_min": (
        0.9, "one worker's share of its role's routed requests at or above (2+ workers): skew",
    ),
    "route_min_requests": (10.0, "requests routed to a role before its skew is judged"),
    "kv_stall_min_s": (
        5.0, "seconds a decode's requests wait for KV from prefill, none arriving over the "
        "connector, before the transfer counts as stalled (the window must be this long)",
    ),
}


@dataclass(frozen=True)
class Verdict:
    key: str
    line: str


def limits(overrides: dict[str, float] | None = None) -> dict[str, float]:
    t = {k: v for k, (v, _) in THRESHOLDS.items()}
    t.update(overrides or {})
    return t


def _f(v: float | None, spec: str = ".0f") -> str:
    return "-" if v is None else format(v, spec)


def _gpus_of(w: Window, f: Figures) -> list[GpuLoad]:
    return [g for g in w.gpus if (g.host, g.index) in f.gpus or f.role in g.roles]


def verdicts(
    w: Window, overrides: dict[str, float] | None = None, packed: dict[int, Packing] | None = None,
    events: list[KvEvent] | None = None, canary: tuple[bool, str] | None = None,
    peers: dict[str, list[str]] | None = None, cpu: bool = False,
) -> list[Verdict]:
    """`packed`: what `pdctl plan` predicts for decode packed N per GPU (top.packing), quoted
    by the phase 3 verdict; without it the verdict quotes the measured packing factor only.
    `events`: the suspect KV lines the engines logged in the window (top/kv_events.py);
    `canary`: (passed, its line) where `top --canary` ran it; `peers`: role -> instances,
    to name the pair of an engine's counter. Those come first: a wrong answer outranks advice.
    `cpu`: the engines run on CPU (engine.device: cpu): no GPU-based verdict (idle GPU,
    bandwidth-bound decode, packing per GPU), and KV pressure names VLLM_CPU_KVCACHE_SPACE."""
    t = limits(overrides)
    out: list[Verdict] = []
    live = [f for f in w.instances if f.error is None]
    if canary is not None:
        out.append(Verdict("pd-canary" if canary[0] else "pd-canary-failed", canary[1]))
    out += kv_suspect(w, live, events or [], peers or {})
    out += kv_stalled(w, live, t, peers or {})
    if not cpu:
        out += _idle(w, t)
        out += _decode_bound(w, live, t, packed or {})
    out += _interference(w, live, t)
    out += _ratio(w, live, t)
    out += _kv_pressure(live, t, cpu)
    out += _fallback(w, live, t)
    out += [Verdict(key, line) for key, line in router_verdicts(w, t)]
    return out


def _idle(w: Window, t: dict[str, float]) -> list[Verdict]:
    out = []
    for g in w.gpus:
        if kind(g, t) != "idle":
            continue
        sm = g.sm_util if g.sm_util is not None else g.util_gpu
        who = f" ({'/'.join(g.roles)})" if g.roles else ""
        msg = (
            f"GPU {g.host}/{g.index}{who} idle: SM {_f(sm)}%, DRAM {_f(g.bandwidth)}% <= "
            f"{t['gpu_idle_max']:.0f}% over {w.seconds:.0f}s: give it work or give it back"
        )
        out.append(Verdict("gpu-idle", msg))
    return out


def _pack_choice(n: int, packed: dict[int, Packing]) -> tuple[int, str]:
    """The N to advise and the plan's figures for it: the largest N up to `n` whose slices
    hold the model, as `pdctl plan` sizes them."""
    if not packed:
        return n, ""
    fitting = [m for m in sorted(packed) if m <= n and packed[m].fits]
    if not fitting:
        return n, "; " + packed[min(packed)].line() if packed else ""
    m = fitting[-1]
    more = f" ({n} per GPU would not: {packed[n].slice_mib:,} MiB slices)" if m < n else ""
    return m, "; " + packed[m].line() + more


def _decode_bound(
    w: Window, live: list[Figures], t: dict[str, float], packed: dict[int, Packing]
) -> list[Verdict]:
    out = []
    for f in live:
        if f.role not in ("decode", "serve") or f.kv_usage is None:
            continue
        if f.kv_usage > t["kv_low_max"]:
            continue
        for g in _gpus_of(w, f):
            if kind(g, t) != "bandwidth-bound":
                continue
            figures = (
                f"{f.name} on GPU {g.host}/{g.index}: DRAM {_f(g.bandwidth)}% >= "
                f"{t['bandwidth_bound_min']:.0f}%, tensor {_f(g.tensor_util)}% <= "
                f"{t['tensor_idle_max']:.0f}%, KV {f.kv_usage:.0%} <= {t['kv_low_max']:.0%}"
            )
            cap = f.max_num_seqs
            full = bool(cap and f.running is not None and f.running >= t["batch_full_ratio"] * cap)
            if full or (f.waiting or 0) >= t["queue_min"]:
                msg = (
                    f"{figures}, running {_f(f.running)} of max-num-seqs {cap or '?'}, waiting "
                    f"{_f(f.waiting)}: bandwidth-bound with a full batch and KV to spare: raise "
                    f"--max-num-seqs on this instance (twice the batch on one instance gave "
                    f"1.8-2.0x tok/s on the H200; a second packed instance gives "
                    f"{TIME_SLICE_EFFICIENCY:.2f}x)"
                )
                out.append(Verdict("decode-raise-batch", msg))
                continue
            n = int(min(t["pack_max"], max(2.0, 1.0 // max(f.kv_usage, 0.01))))
            n, plan = _pack_choice(n, packed)
            now = f", now {_f(f.generation_tps)} tok/s" if f.generation_tps is not None else ""
            msg = (
                f"{figures}, running {_f(f.running)}, waiting {_f(f.waiting)}: the instance "
                f"cannot fill its batch: phase 3, pack {n} decode instances per GPU (frees "
                f"{n - 1} of every {n} decode GPUs; per GPU about "
                f"{TIME_SLICE_EFFICIENCY:.2f}x of one instance at the same batch, measured{now})"
                f"{plan}"
            )
            out.append(Verdict("decode-pack", msg))
    return out


def _interference(w: Window, live: list[Figures], t: dict[str, float]) -> list[Verdict]:
    if w.phase >= 2:
        return []
    out = []
    for f in live:
        if f.role != "serve" or not f.itl_p50 or f.itl_p95 is None or not f.prompt_tps:
            continue
        spread = f.itl_p95 / f.itl_p50
        gen = f.generation_tps or 0.0
        if spread < t["itl_spread_min"] or f.prompt_tps < t["prompt_heavy_ratio"] * gen:
            continue
        msg = (
            f"{f.name}: ITL p95 {f.itl_p95 * 1000:.0f} ms = {spread:.1f}x p50 >= "
            f"{t['itl_spread_min']:.1f}x while prompt {_f(f.prompt_tps)} tok/s >= "
            f"{t['prompt_heavy_ratio']:.1f}x generation {_f(gen)} tok/s: prefill interferes "
            f"with decode: phase 2 (prefill/decode disaggregation)"
        )
        out.append(Verdict("phase2", msg))
    return out


def _ratio(w: Window, live: list[Figures], t: dict[str, float]) -> list[Verdict]:
    roles = role_totals(tuple(live))
    p, d = roles.get("prefill"), roles.get("decode")
    if not p or not d:
        return []
    np_, nd = int(p["instances"]), int(d["instances"])
    pw, dw = p.get("waiting", 0.0), d.get("waiting", 0.0)
    dkv = d.get("kv_usage")
    if pw >= t["queue_min"] * np_ and dw == 0 and (dkv is None or dkv <= t["kv_low_max"]):
        msg = (
            f"prefill queueing ({pw:.0f} waiting on {np_}) while decode idles (0 waiting, "
            f"KV {_f(dkv, '.0%')} <= {t['kv_low_max']:.0%}): move P:D from {np_}:{nd} to "
            f"{np_ + 1}:{max(nd - 1, 1)}"
        )
        return [Verdict("pd-ratio", msg)]
    if dw >= t["queue_min"] * nd and pw == 0:
        msg = (
            f"decode queueing ({dw:.0f} waiting on {nd}) while prefill idles (0 waiting): "
            f"move P:D from {np_}:{nd} to {max(np_ - 1, 1)}:{nd + 1}"
        )
        return [Verdict("pd-ratio", msg)]
    return []


def _kv_pressure(live: list[Figures], t: dict[str, float], cpu: bool = False) -> list[Verdict]:
    out = []
    for f in live:
        full = f.kv_usage is not None and f.kv_usage >= t["kv_full_min"]
        if f.role == "router" or not (full or (f.preemptions or 0) > 0):
            continue
        more = "decode instances" if f.role == "decode" else "instances"
        fix = (
            "raise VLLM_CPU_KVCACHE_SPACE (engine.env, GiB of RAM) if the host has RAM left, "
            f"lower --max-num-seqs, or add {more}"
            if cpu else
            "raise --gpu-memory-utilization if memory is left, lower --max-num-seqs, raise "
            f"tensorParallel for more KV per instance, or add {more}"
        )
        msg = (
            f"{f.name}: KV {_f(f.kv_usage, '.0%')} (near full at >= {t['kv_full_min']:.0%}), "
            f"{_f(f.preemptions)} preemptions in the window: {fix}"
        )
        out.append(Verdict("kv-pressure", msg))
    return out


def _fallback(w: Window, live: list[Figures], t: dict[str, float]) -> list[Verdict]:
    if w.phase < 2:
        return []
    out = []
    for f in live:
        if f.role != "decode" or not f.prompt_by_source:
            continue
        local = f.prompt_by_source.get("local_compute", 0.0)
        received = f.prompt_by_source.get("external_kv_transfer", 0.0)
        uncached = local + received  # prefix-cache hits need neither
        if uncached <= 0 or local / uncached < t["fallback_share_min"]:
            continue
        errs = [f"{k.removeprefix('vllm:')} +{v:.0f}" for k, v in f.connector_errors.items() if v]
        msg = (
            f"{f.name}: computed {local:.0f} of the {uncached:.0f} uncached prompt tokens itself "
            f"({local / uncached:.0%} >= {t['fallback_share_min']:.0%}), received "
            f"{received:.0f} over the KV connector in {w.seconds:.0f}s: KV transfer is not "
            f"working, decode re-does prefill (vLLM #26896); connector: "
            f"{', '.join(errs) or 'no connector errors'}"
        )
        out.append(Verdict("kv-transfer-broken", msg))
    return out


def kv_suspect(w: Window, live: list[Figures], events: list[KvEvent],
               peers: dict[str, list[str]]) -> list[Verdict]:
    """One verdict per prefill -> decode pair and kind of suspect KV event: a line an engine
    logged, or a connector error counter that grew (prefill's or decode's): requests through
    that pair may have been answered from KV that was lost or freed."""
    if w.phase < 2:
        return []
    found = list(events)
    for f in live:
        if f.role in ("prefill", "decode"):
            found += counter_events(f, peers)
    return [
        Verdict("kv-suspect", f"{line} in {w.seconds:.0f}s: answers through this pair may be "
                "wrong; count them as failures (docs/top.md)")
        for line in summary(found, shown=1)
    ]


def kv_stalled(w: Window, live: list[Figures], t: dict[str, float],
               peers: dict[str, list[str]]) -> list[Verdict]:
    """A decode whose requests waited for KV from prefill through the whole window while no
    prompt token came over the connector: the transfer has stalled, and those requests hang
    until the connector gives up. Seen with Mooncake on vLLM 0.23.0 under a burst of 32
    (tests/fixtures/gpu/vllm023-h100-e): vLLM's Mooncake connector exports no counter before
    0.33.0, and 0.23.0's timeout messages come only after 480 s, so neither kv_suspect nor the
    KV-transfer fallback verdict sees it.
    vLLM's `deferred` also counts requests held back by the LoRA budget: with LoRA on, only a
    decode that generated nothing in the window counts."""
    if w.phase < 2 or w.seconds < t["kv_stall_min_s"]:
        return []
    out = []
    for f in live:
        if f.role != "decode" or not f.kv_waiting or f.kv_tokens_received is None:
            continue
        if f.kv_tokens_received > 0 or (f.lora is not None and (f.generation_tps or 0) > 0):
            continue
        msg = (
            f"{pair_of('', f.name, f.role, {}, peers)}: {f.kv_waiting:.0f} requests on "
            f"{f.name} waited for KV from prefill through the whole {w.seconds:.0f}s window "
            "(vLLM's waiting reason `deferred`) and no prompt token came over the KV connector: "
            "the transfer has stalled, and they hang until the connector gives up (Mooncake: "
            "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT + 60 s; before vLLM 0.30.0 even then, until "
            f"decode restarts, e.g. `pdctl restart SPEC {f.name}`: vLLM #50719): count them as "
            "failures, see `pdctl logs SPEC` for the connector's errors (docs/top.md)"
        )
        out.append(Verdict("kv-transfer-stalled", msg))
    return out
