"""`--report`: the HTML page of a bench run, of two compared runs and of a plan, opened in
headless Chromium: it renders (its charts are there), logs no console error and asks for
nothing over the network; the screenshot stays in the test's tmp dir."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.helpers import checked, pdctl, written
from tests.report.chromium import BINARY, visit

FIXTURE = ROOT / "tests/fixtures/gpu/vllm023-h200/bench"
needs_chromium = pytest.mark.skipif(
    BINARY is None, reason="no chromium binary (apt-get install chromium; CI installs it)")


def h200_bench() -> dict[str, Any]:
    return json.loads((FIXTURE / "bench.json").read_text())


def _step(load: str, rate: float, ttft: float, tpot: float, kv: float) -> dict[str, Any]:
    pct = lambda v: {"mean": v, "p50": v, "p90": 1.5 * v, "p99": 2 * v}  # noqa: E731
    return {
        "load": load, "driver": "h1",
        "measured": {"completed": 8, "failed": 0, "durationS": 4.0, "requestThroughput": rate,
                     "outputThroughput": 16 * rate, "totalTokenThroughput": 48 * rate,
                     "requestGoodput": None, "maxConcurrentRequests": 2,
                     "ttftMs": pct(ttft), "tpotMs": pct(tpot), "itlMs": pct(tpot),
                     "e2elMs": pct(ttft + 16 * tpot)},
        "metrics": {"instances": [
            {"name": f"s-serve-{i}", "role": "serve", "requests": 4.0, "preemptions": 0.0,
             "kv_tokens_received": 0.0, "connector_errors": {},
             "peak": {"running": 2.0, "waiting": float(i), "kv_usage": kv},
             "timeline": {"t": [0.0, 1.1, 2.2, 3.3], "running": [0.0, 2.0, 2.0, 1.0],
                          "waiting": [0.0, float(i), 0.0, 0.0],
                          "kvUsage": [0.0, kv / 2, kv, None], "kvReceived": [0.0] * 4}}
            for i in (0, 1)]},
        "predicted": {"ttftMs": ttft / 2, "tpotMs": tpot / 2, "outputThroughput": 20 * rate},
        "ratio": {"ttftMs": 2.0, "tpotMs": 2.0},
    }


def phase0_cpu() -> dict[str, Any]:
    """A small phase-0 report as a CPU run writes it: two replicas, two rate steps, no SLOs."""
    return {
        "kind": "pdctl-bench", "version": 1, "pdctl": "0.1.0", "name": "s", "phase": 0,
        "specHash": "0123456789abcdef", "createdAt": "2026-01-01T00:00:00Z",
        "endpoint": "http://127.0.0.1:8000", "hosts": [{"name": "h1", "address": "127.0.0.1"}],
        "engines": [{"name": f"s-serve-{i}", "role": "serve", "host": "h1", "version": "0.23.0",
                     "flags": {"--max-model-len": "512", "--device": "cpu"}} for i in (0, 1)],
        "router": None,
        "workload": {"promptTokens": 32, "outputTokens": 16, "ttftMs": None, "tpotMs": None},
        "plan": {"basis": "H100-SXM (assumed)"}, "canary": None,
        "steps": [_step("rate 1/s", 0.9, 200.0, 40.0, 0.05),
                  _step("rate 4/s", 2.5, 900.0, 90.0, 0.3)],
    }


def check_page(html: str, tmp_path: Path, name: str, svgs: int) -> None:
    page = written(tmp_path / f"{name}.html", html)
    seen = visit(page, tmp_path / f"{name}.png")
    assert seen.errors == []
    assert seen.requests == []
    assert seen.svgs == svgs
    assert seen.screenshot is not None and seen.screenshot.read_bytes()[:4] == b"\x89PNG"


@needs_chromium
def test_h200_bench_report_renders_offline(tmp_path: Path) -> None:
    from pdctl.report.bench import bench_html

    html = bench_html(h200_bench())
    # latency, throughput, goodput (the workload has SLOs), per role
    check_page(html, tmp_path, "h200", svgs=4)
    assert "--load-format dummy" in html and "a28da9f6c0a6c458" in html  # flags, spec hash
    assert "<!-- TTFT (ms) -->" in html and "<!-- plan p50 -->" in html
    assert "<!-- SLO 500 ms -->" in html
    assert "<!-- gb-serve-0 (serve) -->" in html


@needs_chromium
def test_synthetic_phase0_report_renders_offline(tmp_path: Path) -> None:
    from pdctl.report.bench import bench_html

    html = bench_html(phase0_cpu())
    # latency, throughput, per role, a timeline per step (no SLOs: no goodput chart)
    check_page(html, tmp_path, "phase0", svgs=5)
    assert "<!-- request rate (req/s) -->" in html  # x: the rates, not step numbers
    assert "<!-- s-serve-1 (serve) -->" in html  # a bar per replica


@needs_chromium
def test_compare_report_draws_both_runs(tmp_path: Path) -> None:
    from pdctl.report.bench import compare_html

    a = h200_bench()
    b = copy.deepcopy(a)
    b["specHash"] = "fedcba9876543210"
    html = compare_html(a, b, ["serve: --enforce-eager only in B"])
    check_page(html, tmp_path, "compare", svgs=3)
    for legend in ("A p50", "B p50", "A measured", "B measured"):
        assert f"<!-- {legend} -->" in html
    assert "--enforce-eager only in B" in html


@needs_chromium
def test_plan_report_renders_offline(tmp_path: Path) -> None:
    from pdctl.report.plan import plan_html

    plan = json.loads((FIXTURE / "plan.json").read_text())
    html = plan_html(plan)
    check_page(html, tmp_path, "plan", svgs=1)
    for part in ("weights", "KV cache", "activations", "CUDA graphs"):
        assert f"<!-- {part} -->" in html
    assert "Packing advice (kv-limited, do not pack)" in html


@needs_chromium
@pytest.mark.parametrize("csp", [True, False], ids=["with-csp", "csp-removed"])
def test_the_check_catches_a_network_request_and_a_console_error(tmp_path, csp: bool) -> None:
    """The checks can fail: a script from elsewhere is a request (or, under the page's CSP,
    a console error), and a console.error is an error."""
    from pdctl.report.bench import bench_html

    html = bench_html(phase0_cpu())
    if not csp:
        html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html)
    html = html.replace("<body>", '<body><script src="http://127.0.0.1:9/x.js"></script>'
                        '<script>console.error("boom")</script>', 1)
    page = written(tmp_path / "bad.html", html)
    seen = visit(page, tmp_path / "bad.png")
    if csp:
        assert seen.errors  # the CSP refused both scripts, and said so
    else:
        assert seen.requests == ["http://127.0.0.1:9/x.js"]
        assert any("boom" in e for e in seen.errors)


def test_same_data_same_page() -> None:
    """Deterministic: no date, fixed SVG ids (a golden or a hash of the page can be kept)."""
    from pdctl.report.bench import bench_html

    one, two = bench_html(h200_bench()), bench_html(h200_bench())
    assert one == two
    assert "<dc:date>" not in one
    assert not re.search(r"(src|href)=\"(https?:)?//", one)  # nothing to fetch


def test_cli_compare_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "cmp.html"
    f = str(FIXTURE / "bench.json")
    r = checked(pdctl("bench", "--compare", f, f, "--report", str(out)))
    assert out.read_text().count("<svg") == 3
    assert f"report written to {out}" in r.stderr


def test_cli_plan_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "plan.html"
    checked(pdctl("plan", "examples/phase2-llmd.yaml", "--report", str(out)))
    html = out.read_text()
    assert html.count("<svg") == 1 and "<!-- prefill x" in html and "<!-- decode x" in html


@pytest.mark.parametrize("cmd", [["plan", "examples/phase0-multihost.yaml"],
                                 ["bench", "--compare", "A", "B"],
                                 ["bench", "examples/phase0-multihost.yaml"]],
                         ids=["plan", "compare", "bench"])
@pytest.mark.parametrize("where", ["missing-dir", "a-dir"])
def test_cli_bad_report_path_is_one_line_exit_2(tmp_path, cmd: list[str], where: str) -> None:
    """Refused before anything runs (a bench would first load the deployment for minutes)."""
    path = tmp_path / "no/such/dir/r.html" if where == "missing-dir" else tmp_path
    r = checked(pdctl(*cmd, "--report", str(path)), 2)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --report {path}: "), r.stderr


def test_steps_with_samples_get_timelines_and_older_reports_say_they_have_none() -> None:
    from pdctl.report.bench import bench_html

    none = "no timeline within a step"

    new = bench_html(phase0_cpu())
    assert new.count("seconds into the step") == 2 * 4  # two steps, four charts each
    assert "step rate 4/s: each engine" in new and none not in new
    old = bench_html(h200_bench())  # recorded before bench kept /metrics samples
    assert "seconds into the step" not in old and none in old
