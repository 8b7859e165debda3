"""A bench step that never ends says why where /metrics can: decode waiting for KV that never
came (the real Mooncake decode of tests/fixtures/gpu/vllm023-h100-e after a burst stalled)."""

from __future__ import annotations

from pathlib import Path

from pdctl.bench.stall import KEEP, keep, stall_note
from pdctl.targets.base import Endpoint
from pdctl.top.metrics import parse

TEXT = (Path(__file__).resolve().parents[1]
        / "fixtures/gpu/vllm023-h100-e/phase2-mooncake/metrics-decode.txt").read_text()
ENDPOINTS = [Endpoint("g2mooncake-decode-0", "decode", "h200b", 8200),
             Endpoint("g2mooncake-prefill-0", "prefill", "h200a", 8100)]
PEERS = {"prefill": ["g2mooncake-prefill-0"], "decode": ["g2mooncake-decode-0"]}


def samples(*at: float, text: str = TEXT) -> dict:
    recent: dict = {}
    for t in at:
        keep(recent, {"g2mooncake-decode-0": parse(text, t),
                      "g2mooncake-prefill-0": parse(text, t)})
    return recent


def test_a_stalled_decode_is_named_in_the_steps_error():
    note = stall_note(samples(0, 2, 4, 6, 8, 10), ENDPOINTS, "g2mooncake", 2, PEERS)
    assert note.startswith("; g2mooncake-prefill-0 -> g2mooncake-decode-0: 29 requests on "
                           "g2mooncake-decode-0 waited for KV from prefill through the whole 10s")
    assert note.count("waited for KV") == 1  # prefill's figures are no decode's


def test_no_note_without_a_stall_or_without_enough_samples():
    assert stall_note(samples(0), ENDPOINTS, "g2mooncake", 2, PEERS) == ""
    assert stall_note(samples(0, 3), ENDPOINTS, "g2mooncake", 2, PEERS) == ""  # under 5 s
    moving = samples(0)
    keep(moving, {"g2mooncake-decode-0": parse(TEXT.replace(
        'source="external_kv_transfer"} 1056.0', 'source="external_kv_transfer"} 2000.0'), 10)})
    assert stall_note(moving, ENDPOINTS, "g2mooncake", 2, PEERS) == ""
    assert stall_note(samples(0, 10), ENDPOINTS, "g2mooncake", 0, PEERS) == ""


def test_keep_holds_the_last_samples_only():
    recent = samples(*range(KEEP + 5))
    assert [s.at for s in recent["g2mooncake-decode-0"]] == list(range(5, KEEP + 5))
