"""The bench step's per-engine timelines (bench/remote.Timelines) from real /metrics scrapes of
the vLLM CPU build (tests/top/data: a P/D decode before and after 4 completions)."""

from __future__ import annotations

from pathlib import Path

from pdctl.bench.remote import Timelines
from pdctl.targets.base import Endpoint
from pdctl.top.metrics import parse

DATA = Path(__file__).resolve().parents[1] / "top" / "data"


def scrape(name: str, at: float):
    return parse((DATA / name).read_text(), at)


def test_samples_are_kept_in_order_with_the_kv_received_since_the_step_began():
    decode = Endpoint("d0", "decode", "lo1", 8200)
    before, after = scrape("phase2-decode-before.prom", 100.0), scrape(
        "phase2-decode-after.prom", 103.5)
    lines = Timelines({"d0": before}, {"d0": decode})
    lines.add("d0", before)
    gauges = lines.add("d0", after)
    got = lines.of("d0")
    assert got["t"] == [0.0, 3.5]
    assert got["kvReceived"][0] == 0.0
    # the decode received its prompts' KV over the connector between the two scrapes
    assert got["kvReceived"][1] == 192.0  # external_kv_transfer: 0 before, 192 after
    assert got["kvUsage"] == [0.0, gauges["kv_usage"]]
    assert len(got["running"]) == len(got["waiting"]) == 2


def test_a_failed_scrape_or_an_unknown_engine_adds_no_point():
    decode = Endpoint("d0", "decode", "lo1", 8200)
    before = scrape("phase2-decode-before.prom", 0.0)
    lines = Timelines({"d0": before}, {"d0": decode})
    assert lines.add("d0", parse("not prometheus {{{", 1.0)) == {}
    assert lines.add("other", before) == {}
    assert lines.of("d0") == {k: [] for k in Timelines.FIELDS}
