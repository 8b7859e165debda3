"""Two snapshots of one instance's /metrics -> the figures of that window (pure)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pdctl.top.gpu import GpuLoad
from pdctl.top.lora import lora_adapters
from pdctl.top.metrics import CONNECTOR_ERRORS, DEFERRED, Snapshot, delta, quantile
from pdctl.top.router import RouterFigures, router_figures


@dataclass(frozen=True)
class Figures:
    """One engine (or the router) over a window of `seconds`. Rates per second; latencies in
    seconds; kv_usage 0-1; counts are deltas over the window, `totals` the counters at its end."""

    name: str
    role: str
    where: str
    seconds: float = 0.0
    running: float | None = None
    waiting: float | None = None
    request_rate: float | None = None
    prompt_tps: float | None = None
    generation_tps: float | None = None
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    itl_p50: float | None = None
    itl_p95: float | None = None
    kv_usage: float | None = None
    prefix_hit_rate: float | None = None
    preemptions: float | None = None
    requests: float | None = None
    prompt_by_source: dict[str, float] = field(default_factory=dict)
    kv_tokens_received: float | None = None
    connector_errors: dict[str, float] = field(default_factory=dict)
    totals: dict[str, float] = field(default_factory=dict)
    max_num_seqs: int | None = None
    # requests waiting for KV from a remote prefill at the window's start and at its end (the
    # fewer of the two; vLLM's `num_requests_waiting_by_reason{reason="deferred"}`): None where
    # the engine has no such gauge
    kv_waiting: float | None = None
    gpus: tuple[tuple[str, int], ...] = ()  # (host, index) of its GPUs where known
    error: str | None = None
    # LoRA: (adapters with running requests, with waiting ones); None without LoRA (top/lora.py)
    lora: tuple[tuple[str, ...], tuple[str, ...]] | None = None


def _bucket_delta(first: Snapshot, last: Snapshot, name: str | None) -> list[tuple[float, float]]:
    if name is None:
        return []
    before = dict(first.buckets(name))
    rows = [(le, c - before.get(le, 0.0)) for le, c in last.buckets(name)]
    if any(c < 0 for _, c in rows):
        return last.buckets(name)
    return rows


def figures(
    name: str, role: str, where: str, first: Snapshot, last: Snapshot,
    max_num_seqs: int | None = None, gpus: tuple[tuple[str, int], ...] = (),
) -> Figures:
    """The figures between `first` and `last` (same instance, `last` later)."""
    base = Figures(name, role, where, max_num_seqs=max_num_seqs, gpus=gpus)
    if last.error or first.error:
        return Figures(**{**base.__dict__, "error": last.error or first.error})
    seconds = max(last.at - first.at, 1e-9)

    def rate(figure: str) -> float | None:
        d = delta(first, last, last.pick(figure))
        return None if d is None else d / seconds

    def gauge(figure: str) -> float | None:
        n = last.pick(figure)
        return None if n is None else last.total(n)

    def pct(figure: str, q: float) -> float | None:
        return quantile(q, _bucket_delta(first, last, last.pick(figure)))

    hits = delta(first, last, last.pick("prefix_hits"))
    queries = delta(first, last, last.pick("prefix_queries"))
    by_source: dict[str, float] = {}
    src = last.pick("prompt_by_source")
    if src:
        before = first.by_label(src, "source")
        for key, value in last.by_label(src, "source").items():
            by_source[key] = value - before.get(key, 0.0)
    errors: dict[str, float] = {}
    for metric in sorted(last.names()):
        if metric in CONNECTOR_ERRORS or (
            metric.startswith("vllm:") and "failed" in metric and metric.endswith("_total")
        ):
            errors[metric] = delta(first, last, metric) or 0.0
    totals = {}
    for figure in ("requests", "prompt_tokens", "generation_tokens", "preemptions"):
        counter = last.pick(figure)
        if counter is not None:
            totals[figure] = last.total(counter) or 0.0
    if src:
        for key, value in last.by_label(src, "source").items():
            totals[f"prompt_tokens_{key}"] = value
    start, end = (x.total(DEFERRED, reason="deferred") for x in (first, last))
    return Figures(
        name, role, where, seconds, running=gauge("running"), waiting=gauge("waiting"),
        request_rate=rate("requests"), prompt_tps=rate("prompt_tokens"),
        generation_tps=rate("generation_tokens"), ttft_p50=pct("ttft", 0.5),
        ttft_p95=pct("ttft", 0.95), itl_p50=pct("itl", 0.5), itl_p95=pct("itl", 0.95),
        kv_usage=gauge("kv_usage"),
        prefix_hit_rate=(hits / queries) if hits is not None and queries else None,
        preemptions=delta(first, last, last.pick("preemptions")),
        requests=delta(first, last, last.pick("requests")), prompt_by_source=by_source,
        kv_tokens_received=by_source.get("external_kv_transfer") if src else None,
        connector_errors=errors, totals=totals, max_num_seqs=max_num_seqs, gpus=gpus,
        lora=lora_adapters(last),
        kv_waiting=None if start is None or end is None else min(start, end),
    )


@dataclass(frozen=True)
class Window:
    """Everything one window of `pdctl top` saw."""

    name: str
    phase: int
    target: str
    seconds: float
    instances: tuple[Figures, ...]
    gpus: tuple[GpuLoad, ...] = ()
    gpu_missing: tuple[str, ...] = ()  # why telemetry is missing, per host/cluster
    routers: tuple[RouterFigures, ...] = ()  # vllm-router's own figures (phase 2 hosts)


SUMMED = (
    "running", "waiting", "request_rate", "prompt_tps", "generation_tps", "preemptions", "requests",
    "kv_tokens_received",
)


def role_totals(instances: tuple[Figures, ...]) -> dict[str, dict[str, float]]:
    """Per role: the sums of SUMMED, and the mean KV usage."""
    out: dict[str, dict[str, float]] = {}
    for f in instances:
        if f.error:
            continue
        row = out.setdefault(f.role, {"instances": 0})
        row["instances"] += 1
        for key in SUMMED:
            v = getattr(f, key)
            if v is not None:
                row[key] = row.get(key, 0.0) + v
        if f.kv_usage is not None:
            row["kv_usage_sum"] = row.get("kv_usage_sum", 0.0) + f.kv_usage
            row["kv_usage_n"] = row.get("kv_usage_n", 0) + 1
    for row in out.values():
        n = row.pop("kv_usage_n", 0)
        s = row.pop("kv_usage_sum", 0.0)
        if n:
            row["kv_usage"] = s / n
    return out


def assemble(
    name: str, phase: int, target: str, endpoints: list[Any], first: dict[str, Snapshot],
    last: dict[str, Snapshot], gpus: list[GpuLoad], gpu_missing: list[str],
    workers: dict[str, tuple[str, str]] | None = None,
) -> Window:
    """The Window of `endpoints` (objects with name, role, where, max_num_seqs, gpus) between
    two scrapes; `workers` (engine URL -> (instance, role)) names the router's workers."""
    rows = []
    routers = []
    seconds = 0.0
    for e in endpoints:
        a = first.get(e.name) or Snapshot(0.0, (), "no first sample")
        b = last.get(e.name) or Snapshot(0.0, (), "no sample")
        f = figures(e.name, e.role, e.where, a, b, e.max_num_seqs, e.gpus)
        if e.role == "router":
            r = router_figures(e.name, e.where, a, b, workers or {})
            routers.append(r)
            f = replace(f, request_rate=r.request_rate, requests=r.requests)
        seconds = max(seconds, f.seconds)
        rows.append(f)
    return Window(
        name, phase, target, seconds, tuple(rows), tuple(gpus), tuple(gpu_missing), tuple(routers),
    )


def as_dict(w: Window) -> dict[str, Any]:
    """The window as plain JSON-able data (figures rounded for reading)."""

    def clean(d: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for k, v in d.items():
            if isinstance(v, float):
                v = round(v, 4)
            elif isinstance(v, dict):
                v = clean(v)
            elif isinstance(v, tuple):
                v = [
                    clean(x) if isinstance(x, dict) else list(x) if isinstance(x, tuple) else x
                    for x in v
                ]
            out[k] = v
        return out

    return {
        "name": w.name, "phase": w.phase, "target": w.target, "window_s": round(w.seconds, 3),
        "instances": [clean(asdict(f)) for f in w.instances],
        "roles": {k: clean(v) for k, v in sorted(role_totals(w.instances).items())},
        "gpus": [clean(asdict(g)) for g in w.gpus], "gpu_missing": list(w.gpu_missing),
        "router": [clean(asdict(r)) for r in w.routers],
    }
