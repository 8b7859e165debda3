"""A bench step that never ends says why where /metrics can: decode waiting for KV that never
came (the real Mooncake decode of tests/fixtures/gpu/vllm023-h100-e after a burst stalled)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pdctl.bench.stall import KEEP, STALL_STOP_S, StallWatch, keep, stall_note, stop_command
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


def test_a_stall_stops_the_step_once_after_stall_stop_s_and_a_break_resets_the_count():
    w = StallWatch(120)
    assert not w.see("", 0) and not w.see("stalled", 1) and not w.see("stalled", 120)
    assert not w.see("", 121)  # KV arrived: the count starts again
    assert not w.see("stalled", 130) and not w.see("stalled", 249)
    assert w.see("stalled", 250) and w.stopped
    assert not w.see("stalled", 400)  # once
    assert STALL_STOP_S == 120


def test_the_stop_command_ends_that_steps_bench_and_nothing_else(tmp_path):
    """Real processes: one stands for the step's `vllm bench serve`, one for another step's."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    mine = subprocess.Popen([*sleeper, "--result-dir", f"{tmp_path}/bench-1-2"])
    other = subprocess.Popen([*sleeper, "--result-dir", f"{tmp_path}/bench-1-3"])
    try:
        done = subprocess.run(["bash", "-c", stop_command(f"{tmp_path}/bench-1-2")],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr  # the shell running pkill was not killed
        assert mine.wait(timeout=10) != 0
        assert other.poll() is None
        # nothing left to stop is no error
        again = subprocess.run(["bash", "-c", stop_command(f"{tmp_path}/bench-1-2")],
                               capture_output=True, text=True, timeout=30)
        assert again.returncode == 0
    finally:
        for p in (mine, other):
            p.kill()
            p.wait()
