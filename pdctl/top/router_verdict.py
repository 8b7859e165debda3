"""Verdicts on vllm-router's figures (pure): failing requests, a worker the router dropped,
one worker receiving everything. Thresholds come from verdict.THRESHOLDS (passed in)."""

from __future__ import annotations

from pdctl.top.router import RouterFigures, Worker
from pdctl.top.window import Window


def router_verdicts(w: Window, t: dict[str, float]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for r in w.routers:
        if r.error is not None:
            continue
        out += _errors(r, t)
        out += _dropped(r)
        out += _skew(r, t)
    return out


def _who(x: Worker) -> str:
    return x.instance if x.instance == x.url else f"{x.instance} ({x.url})"


def _errors(r: RouterFigures, t: dict[str, float]) -> list[tuple[str, str]]:
    errors = r.errors or 0.0
    exhausted = r.retries_exhausted or 0.0
    if not errors and not exhausted:
        return []
    requests = r.requests or 0.0
    share = errors / requests if requests else 1.0
    if share < t["router_error_share_min"] and not exhausted:
        return []
    kinds = ", ".join(f"{k} +{v:.0f}" for k, v in sorted(r.error_kinds.items()))
    at = [f"{_who(x)} +{x.errors:.0f}" for x in r.workers if x.errors]
    retries = ""
    if r.retries is not None or r.retries_exhausted is not None:
        retries = f", retries +{r.retries or 0:.0f}, exhausted +{exhausted:.0f}"
    msg = (
        f"{r.name}: {errors:.0f} errors in {requests:.0f} requests ({share:.0%} >= "
        f"{t['router_error_share_min']:.0%}) over {r.seconds:.0f}s ({kinds or 'no type'}"
        f"{retries}); at {', '.join(at) or 'no one worker'}: clients get errors: read that "
        f"instance's log (pdctl logs SPEC INSTANCE)"
    )
    return [("router-errors", msg)]


def _dropped(r: RouterFigures) -> list[tuple[str, str]]:
    out = []
    seen = set()
    for x in r.workers:
        if x.url in seen or (x.healthy is not False and x.breaker not in ("open", "half-open")):
            continue
        seen.add(x.url)
        why = "health check failing" if x.healthy is False else f"circuit breaker {x.breaker}"
        msg = (
            f"{r.name}: {_who(x)} ({x.role}) {why}: the router sends it no requests, the "
            f"other {x.role} instances carry its share: pdctl status SPEC, pdctl logs SPEC"
        )
        out.append(("router-worker-down", msg))
    return out


def _skew(r: RouterFigures, t: dict[str, float]) -> list[tuple[str, str]]:
    out = []
    for role in sorted({x.role for x in r.workers}):
        rows = [x for x in r.workers if x.role == role]
        total = sum(x.routed for x in rows)
        if len(rows) < 2 or total < t["route_min_requests"]:
            continue
        top = max(rows, key=lambda x: x.routed)
        share = top.routed / total
        if share < t["route_skew_min"]:
            continue
        others = [x for x in rows if x is not top]
        down = [x for x in others if x.healthy is False or x.breaker in ("open", "half-open")]
        cause = (
            f"{', '.join(_who(x) for x in down)} dropped by the router"
            if down
            else "the routing policy sends it everything (cache_aware routes one shared "
            "prefix to one worker: set router.policy)"
        )
        msg = (
            f"{r.name}: {_who(top)} got {top.routed:.0f} of {total:.0f} {role} requests "
            f"({share:.0%} >= {t['route_skew_min']:.0%}) over {r.seconds:.0f}s, "
            f"{len(others)} other {role} instance(s) idle: {cause}"
        )
        out.append(("router-skew", msg))
    return out
