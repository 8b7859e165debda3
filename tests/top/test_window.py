"""Prometheus text -> snapshots -> a window's figures, on /metrics recorded from the real vLLM
CPU build (0.32.0) by tests/e2e/test_top.py (PDCTL_TOP_RECORD), 4 requests of 8 tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdctl.top.metrics import CONNECTOR_ERRORS, NAMES, Snapshot, parse, quantile
from pdctl.top.window import as_dict, assemble, figures, role_totals

DATA = Path(__file__).parent / "data"


def snap(name: str, at: float):
    return parse((DATA / name).read_text(), at)


def phase0():
    return figures(
        "e2etop-serve-0", "serve", "lo1", snap("phase0-before.prom", 100.0),
        snap("phase0-after.prom", 140.0),
    )


def test_recorded_window_gives_rates_latencies_and_kv():
    f = phase0()
    assert f.error is None and f.seconds == 40.0
    assert f.requests == 4 and f.request_rate == pytest.approx(0.1)
    assert f.generation_tps == pytest.approx(32 / 40) and f.prompt_tps == pytest.approx(384 / 40)
    assert f.prompt_by_source == {
        "local_compute": 384.0, "local_cache_hit": 0.0, "external_kv_transfer": 0.0,
    }
    assert f.kv_usage == 0.0 and f.running == 0.0 and f.waiting == 0.0
    assert 0 < f.ttft_p50 <= f.ttft_p95 and 0 < f.itl_p50 <= f.itl_p95
    assert f.totals["generation_tokens"] == 32 and f.totals["requests"] == 4


def test_a_counter_that_went_back_reads_as_a_restart():
    """The engine restarted inside the window: its counters start again from zero."""
    f = figures("x", "serve", "h", snap("phase0-after.prom", 0.0), snap("phase0-before.prom", 10.0))
    assert f.requests == 0 and f.generation_tps == 0


def test_an_unreachable_instance_keeps_its_row_with_the_reason():
    f = figures("x", "decode", "h", Snapshot(0.0), Snapshot(5.0, (), "/metrics answered 503"))
    assert f.error == "/metrics answered 503" and f.requests is None


def test_garbage_metrics_are_a_named_error_not_a_crash():
    s = parse("vllm:num_requests_running{engine=0 1\n", 0.0)
    assert s.error and s.error.startswith("unreadable metrics")


def test_histogram_quantile_interpolates_like_prometheus():
    buckets = [(0.1, 1.0), (1.0, 3.0), (float("inf"), 4.0)]
    assert quantile(0.5, buckets) == pytest.approx(0.55)
    assert quantile(0.95, buckets) == 1.0  # in the +Inf bucket: its lower bound
    assert quantile(0.5, [(1.0, 0.0), (float("inf"), 0.0)]) is None


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_every_metric_name_read_exists_in_the_pinned_version(version):
    """tests/top/data/vllm-<v>-metric-names.txt: every `"vllm:..."` string in vllm/v1/metrics and
    vllm/distributed/kv_transfer of that version's source (the CPU build 0.32.0 the e2e runs,
    the 0.33.0 wheel)."""
    names = set((DATA / f"vllm-{version}-metric-names.txt").read_text().split())
    current = [alts[0] for alts in NAMES.values()]
    base = {n.removesuffix("_total") for n in current}
    assert base <= names, base - names
    if version == "0.33.0":
        assert {n.removesuffix("_total") for n in CONNECTOR_ERRORS} <= names


def test_assemble_and_json_hold_roles_and_missing_telemetry():
    class E:
        name, role, where, max_num_seqs, gpus = "e2etop-serve-0", "serve", "lo1", None, ()

    w = assemble(
        "e2etop", 0, "hosts", [E()], {E.name: snap("phase0-before.prom", 0.0)},
        {E.name: snap("phase0-after.prom", 40.0)}, [], ["lo1: NVML: not found"],
    )
    doc = as_dict(w)
    assert doc["window_s"] == 40.0 and doc["gpu_missing"] == ["lo1: NVML: not found"]
    assert doc["roles"]["serve"]["requests"] == 4
    assert role_totals(w.instances)["serve"]["instances"] == 1
