"""vllm-router's own metrics in `pdctl top`: figures, verdicts, the dashboard's router table
and -o json, on recordings of the real router 0.1.17 (tests/fixtures/router-metrics/)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from rich.console import Console

from pdctl.targets.base import Endpoint
from pdctl.top import router as rt
from pdctl.top.dashboard import render
from pdctl.top.metrics import Snapshot, parse
from pdctl.top.router import router_figures
from pdctl.top.verdict import verdicts
from pdctl.top.window import Window, as_dict, assemble

REC = Path(__file__).parents[1] / "fixtures" / "router-metrics"
URLS = json.loads((REC / "workers.json").read_text())
WORKERS = {
    url: (f"rec-{role}-{i}", role) for role, urls in URLS.items() for i, url in enumerate(urls)
}
DEC0, DEC1 = URLS["decode"]


def snap(name: str, at: float):
    return parse((REC / f"{name}.prom").read_text(), at)


def figs(a: str, b: str):
    return router_figures("rec-router", "lo", snap(a, 0.0), snap(b, 30.0), WORKERS)


def win(a: str, b: str) -> Window:
    return Window("rec", 2, "hosts", 30.0, (), routers=(figs(a, b),))


def by(r, role: str) -> dict[str, float]:
    return {w.instance: w.routed for w in r.workers if w.role == role}


def test_every_router_metric_read_is_in_the_pinned_router():
    names = (REC / "vllm-router-0.1.17-names.txt").read_text()
    used = [*rt.REQUESTS, *rt.DURATION, *rt.ERRORS, rt.RETRIES, rt.RETRIES_EXHAUSTED]
    used += [*rt.ROUTED.values(), rt.ROUTED_PLAIN, *rt.WORKER_ERRORS, rt.HEALTH, rt.BREAKER]
    for name in used:
        assert name in names, name


def test_a_healthy_window_counts_requests_and_routing_per_worker():
    r = figs("before", "after")
    assert r.requests == 24 and abs(r.request_rate - 24 / 30) < 1e-9
    assert r.errors == 0 and r.error_kinds == {}
    assert by(r, "prefill") == {"rec-prefill-0": 24}
    assert by(r, "decode") == {"rec-decode-0": 12, "rec-decode-1": 12}
    assert all(w.healthy for w in r.workers)
    assert r.latency_p50 is not None and r.latency_p95 >= r.latency_p50
    assert [v.key for v in verdicts(win("before", "after"))] == []


def test_decode_errors_are_counted_at_their_worker_and_named_in_a_verdict():
    r = figs("after", "after-errors")
    assert r.requests == 12 and r.errors == 6
    assert {w.instance: w.errors for w in r.workers if w.errors} == {"rec-decode-1": 6}
    (v,) = [v for v in verdicts(win("after", "after-errors")) if v.key == "router-errors"]
    assert "6 errors in 12 requests (50% >= 1%)" in v.line
    assert f"rec-decode-1 ({DEC1}) +6" in v.line and "pd_decode_errors +6" in v.line


def test_one_worker_receiving_everything_names_the_dropped_one():
    r = figs("after-errors", "after-one-down")
    assert by(r, "decode") == {"rec-decode-0": 12, "rec-decode-1": 0}
    assert {w.instance: w.healthy for w in r.workers if w.role == "decode"} == {
        "rec-decode-0": True, "rec-decode-1": False,
    }
    found = {v.key: v.line for v in verdicts(win("after-errors", "after-one-down"))}
    assert "got 12 of 12 decode requests (100% >= 90%)" in found["router-skew"]
    skew = found["router-skew"]
    assert "rec-decode-1" in skew and "dropped by the router" in skew
    assert "rec-decode-1" in found["router-worker-down"]
    assert "health check failing" in found["router-worker-down"]
    # the prefill role has one worker: never a skew
    assert "prefill requests" not in found["router-skew"]


def test_a_policy_skew_without_a_dropped_worker_names_the_policy():
    # the recorded decode-0 counters as if both were healthy: edit only the health gauge
    text = (REC / "after-one-down.prom").read_text()
    text = re.sub(r'(vllm_router_worker_health\{worker="[^"]+"\}) 0', r"\1 1", text)
    r = router_figures("rec-router", "lo", snap("after-errors", 0), parse(text, 30), WORKERS)
    lines = [v.line for v in verdicts(Window("rec", 2, "hosts", 30, (), routers=(r,)))]
    assert any("routing policy sends it everything" in line for line in lines), lines
    assert not any("health check failing" in line for line in lines)


def test_workers_are_named_by_port_when_the_url_differs():
    # discovered workers (P2pNccl) register host:port as they see it
    other = {u.replace("127.0.0.1", "10.0.0.9"): v for u, v in WORKERS.items()}
    r = router_figures("r", "lo", snap("before", 0), snap("after", 30), other)
    assert by(r, "decode") == {"rec-decode-0": 12, "rec-decode-1": 12}


def test_router_row_in_json_and_dashboard():
    ends = [Endpoint("rec-router", "router", "lo", 1)]
    w = assemble(
        "rec", 2, "hosts", ends, {"rec-router": snap("after", 0.0)},
        {"rec-router": snap("after-errors", 30.0)}, [], [], WORKERS,
    )
    doc = json.loads(json.dumps(as_dict(w)))
    (router,) = doc["router"]
    assert router["requests"] == 12 and router["errors"] == 6
    assert {x["instance"]: x["routed"] for x in router["workers"] if x["role"] == "decode"} == {
        "rec-decode-0": 6, "rec-decode-1": 6,
    }
    (row,) = doc["instances"]
    assert row["role"] == "router" and row["requests"] == 12 and row["request_rate"] == 0.4
    out = io.StringIO()
    Console(file=out, width=200, no_color=True).print(render(w, verdicts(w)))
    text = out.getvalue()
    assert "router rec-router  0.40 req/s, 12 requests, 6 errors" in text
    row = r"rec-decode-1[ │]+decode[ │]+http://127\.0\.0\.1:\d+[ │]+6[ │]+50%[ │]+6[ │]+ok"
    assert re.search(row, text), text
    assert "[router-errors]" in text


def test_an_unanswered_router_is_said_not_invented():
    r = router_figures("r", "lo", Snapshot(0, (), "/metrics: no answer"), snap("after", 1), {})
    assert r.error == "/metrics: no answer" and r.requests is None
    assert verdicts(Window("rec", 2, "hosts", 30, (), routers=(r,))) == []


def test_the_e2e_router_in_front_of_real_vllm_engines():
    """tests/e2e/test_top.py's phase 2 (real vLLM CPU prefill and decode over NIXL, the real
    router, 4 completions inside the window; kept with PDCTL_TOP_RECORD)."""
    workers = {
        "http://127.0.0.1:18750": ("e2etoppd-prefill-0", "prefill"),
        "http://127.0.0.1:18760": ("e2etoppd-decode-0", "decode"),
    }
    r = router_figures(
        "e2etoppd-router", "lo1", snap("e2e-phase2-before", 0), snap("e2e-phase2-after", 45),
        workers,
    )
    assert (r.requests, r.errors) == (4, 0)
    assert {(w.instance, w.role, w.routed, w.healthy) for w in r.workers} == {
        ("e2etoppd-prefill-0", "prefill", 4, True), ("e2etoppd-decode-0", "decode", 4, True),
    }
    assert r.latency_p50 is not None and r.latency_p95 >= r.latency_p50
    assert verdicts(Window("e2etoppd", 2, "hosts", 45, (), routers=(r,))) == []
