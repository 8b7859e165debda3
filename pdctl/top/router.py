"""vllm-router's own metrics (its --prometheus-port) over a window -> RouterFigures (pure).

The names are the pinned router's (pdctl.compat.ROUTER_VERSION 0.1.17; `src/metrics.rs` of
github vllm-project/router, checked against the names in the 0.1.17 wheel's library and a
recording of the real router: tests/fixtures/router-metrics/). In PD mode the router counts
`vllm_router_pd_requests_total{route}`, per worker `vllm_router_pd_prefill_requests_total`,
`vllm_router_pd_decode_requests_total` and their `*_errors_total`; in plain mode
`vllm_router_requests_total{route}`, `vllm_router_processed_requests_total{worker}` and
`vllm_router_request_errors_total{route,error_type}`. Worker labels are the engine URLs the
router was given (plan.router.engine_url)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pdctl.top.metrics import Snapshot, delta, quantile

REQUESTS = ("vllm_router_pd_requests_total", "vllm_router_requests_total")
DURATION = ("vllm_router_pd_request_duration_seconds", "vllm_router_request_duration_seconds")
# errors not tied to a worker (by route / error type)
ERRORS = ("vllm_router_pd_errors_total", "vllm_router_request_errors_total")
RETRIES = "vllm_router_retries_total"
RETRIES_EXHAUSTED = "vllm_router_retries_exhausted_total"
# per worker: role -> counter of requests routed there, and its errors
ROUTED = {
    "prefill": "vllm_router_pd_prefill_requests_total",
    "decode": "vllm_router_pd_decode_requests_total",
}
ROUTED_PLAIN = "vllm_router_processed_requests_total"
WORKER_ERRORS = (
    "vllm_router_pd_prefill_errors_total", "vllm_router_pd_decode_errors_total",
    "vllm_router_pd_stream_errors_total",
)
HEALTH = "vllm_router_worker_health"  # 1 healthy, 0 not
BREAKER = "vllm_router_cb_state"  # 0 closed, 1 open, 2 half open
BREAKER_STATES = {0.0: "closed", 1.0: "open", 2.0: "half-open"}


@dataclass(frozen=True)
class Worker:
    """One engine as the router sees it over the window."""

    url: str
    instance: str  # the plan's instance name, or the URL where no instance has it
    role: str
    routed: float = 0.0  # requests the router sent there in the window
    errors: float = 0.0  # prefill/decode/stream errors there in the window
    healthy: bool | None = None
    breaker: str | None = None


@dataclass(frozen=True)
class RouterFigures:
    name: str
    where: str
    seconds: float = 0.0
    requests: float | None = None
    request_rate: float | None = None
    errors: float | None = None  # all errors in the window (router-level and per worker)
    error_kinds: dict[str, float] = field(default_factory=dict)
    retries: float | None = None
    retries_exhausted: float | None = None
    latency_p50: float | None = None  # whole request through the router (prefill + decode)
    latency_p95: float | None = None
    workers: tuple[Worker, ...] = ()
    error: str | None = None


def _worker_delta(first: Snapshot, last: Snapshot, name: str) -> dict[str, float]:
    before = first.by_label(name, "worker")
    out = {}
    for url, v in last.by_label(name, "worker").items():
        a = before.get(url, 0.0)
        out[url] = v - a if v >= a else v
    return out


def _named(url: str, workers: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """(instance, role) of a worker URL: exactly, else by port (discovered workers register
    host:port as they see it), else the URL itself."""
    if url in workers:
        return workers[url]
    port = url.rstrip("/").rsplit(":", 1)[-1]
    same = [v for u, v in workers.items() if u.rstrip("/").rsplit(":", 1)[-1] == port]
    return same[0] if len(same) == 1 else (url, "?")


def router_figures(
    name: str, where: str, first: Snapshot, last: Snapshot, workers: dict[str, tuple[str, str]],
) -> RouterFigures:
    """The router's figures between two scrapes; `workers`: engine URL -> (instance, role)."""
    if first.error or last.error:
        return RouterFigures(name, where, error=last.error or first.error)
    seconds = max(last.at - first.at, 1e-9)
    have = last.names()
    requests = None
    for counter in REQUESTS:
        if counter in have:
            requests = (requests or 0.0) + (delta(first, last, counter) or 0.0)
    kinds: dict[str, float] = {}  # router-level errors by type, then per-worker ones
    for counter in ERRORS:
        before = first.by_label(counter, "error_type")
        for kind, v in last.by_label(counter, "error_type").items():
            d = v - before.get(kind, 0.0)
            if d > 0:
                kinds[kind or counter] = kinds.get(kind or counter, 0.0) + d
    routed: dict[tuple[str, str], float] = {}
    for role, counter in ROUTED.items():
        for url, d in _worker_delta(first, last, counter).items():
            routed[(url, role)] = d
    if not routed:
        for url, d in _worker_delta(first, last, ROUTED_PLAIN).items():
            routed[(url, _named(url, workers)[1])] = d
    router_level = sum(kinds.values())
    errors_at: dict[str, float] = {}
    for counter in WORKER_ERRORS:
        for url, d in _worker_delta(first, last, counter).items():
            errors_at[url] = errors_at.get(url, 0.0) + d
            if d > 0:
                short = counter.removeprefix("vllm_router_").removesuffix("_total")
                kinds[short] = kinds.get(short, 0.0) + d
    health = last.by_label(HEALTH, "worker")
    breaker = last.by_label(BREAKER, "worker")
    urls = {url for url, _ in routed} | set(health) | set(errors_at)
    rows = []
    for url in sorted(urls):
        instance, role = _named(url, workers)
        roles = [r for (u, r) in routed if u == url] or [role]
        for r in roles:
            rows.append(
                Worker(
                    url, instance, r, routed.get((url, r), 0.0), errors_at.get(url, 0.0),
                    None if url not in health else health[url] >= 1,
                    BREAKER_STATES.get(breaker[url]) if url in breaker else None,
                )
            )
    rows.sort(key=lambda w: (w.role, w.instance))
    dur = next((n for n in DURATION if n + "_bucket" in have), None)
    buckets: list[tuple[float, float]] = []
    if dur is not None:
        before_b = dict(first.buckets(dur))
        buckets = [(le, c - before_b.get(le, 0.0)) for le, c in last.buckets(dur)]
    retries = delta(first, last, RETRIES) if RETRIES in have else None
    exhausted = delta(first, last, RETRIES_EXHAUSTED) if RETRIES_EXHAUSTED in have else None
    return RouterFigures(
        name, where, seconds, requests=requests,
        request_rate=None if requests is None else requests / seconds,
        # the PD router may count one failure both by type and at its worker: the larger
        errors=max(router_level, sum(errors_at.values())), error_kinds=kinds, retries=retries,
        retries_exhausted=exhausted, latency_p50=quantile(0.5, buckets),
        latency_p95=quantile(0.95, buckets), workers=tuple(rows),
    )


def readiness(status: int, body: str) -> dict[str, tuple[int, int]] | None:
    """vllm-router's `GET /readiness` in P/D mode -> role -> (healthy, total) workers; None
    where the answer has no such counts (plain mode, an older router). Recorded from the real
    0.1.17 (tests/cli/data/router-readiness-*.json): 200 `{"status":"ready","prefill":
    {"healthy":1,"total":1},"decode":{"healthy":1,"total":1}}`, and 503 `{"status":
    "not_ready","reason":"no healthy decode workers",...}` while every request gets 503 "No
    available workers: 1 prefill, 0 decode" and /liveness still answers 200 OK."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    out = {}
    for role in ("prefill", "decode"):
        counts = doc.get(role)
        if isinstance(counts, dict) and isinstance(counts.get("total"), int):
            out[role] = (int(counts.get("healthy") or 0), int(counts["total"]))
    return out or None
