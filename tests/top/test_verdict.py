"""Verdicts are pure functions of a window: one line each, naming figures and thresholds."""

from __future__ import annotations

from pathlib import Path

from pdctl.top.metrics import parse
from pdctl.top.verdict import THRESHOLDS, verdicts
from pdctl.top.window import Figures, Window, figures

DATA = Path(__file__).parent / "data"


def win(*instances: Figures, phase: int = 0) -> Window:
    return Window("llm", phase, "hosts", 60.0, instances)


def keys(w: Window) -> list[str]:
    return [v.key for v in verdicts(w)]


def test_every_threshold_has_a_meaning():
    assert all(isinstance(v, float) and text for v, text in THRESHOLDS.values())


def test_the_recorded_phase0_window_has_nothing_to_say():
    f = figures(
        "e2etop-serve-0", "serve", "lo1", parse((DATA / "phase0-before.prom").read_text(), 0.0),
        parse((DATA / "phase0-after.prom").read_text(), 45.0),
    )
    assert verdicts(win(f)) == []


def test_itl_spread_under_heavy_prompt_load_says_phase2():
    f = Figures(
        "s-0", "serve", "h", 60, itl_p50=0.02, itl_p95=0.09, prompt_tps=5000, generation_tps=800
    )
    (v,) = verdicts(win(f))
    assert v.key == "phase2"
    assert "ITL p95 90 ms = 4.5x p50 >= 2.0x while prompt 5000 tok/s >= 1.0x generation 800" in (
        v.line
    )
    assert keys(win(f, phase=2)) == []  # already disaggregated
    calm = Figures(
        "s-0", "serve", "h", 60, itl_p50=0.02, itl_p95=0.03, prompt_tps=5000, generation_tps=800
    )
    assert keys(win(calm)) == []


def test_prefill_queue_with_idle_decode_moves_the_ratio_and_the_reverse():
    p = Figures("p-0", "prefill", "h", 60, waiting=6, running=4)
    d = Figures("d-0", "decode", "h", 60, waiting=0, running=3, kv_usage=0.1)
    d2 = Figures("d-1", "decode", "h", 60, waiting=0, running=2, kv_usage=0.2)
    (v,) = verdicts(win(p, d, d2, phase=2))
    assert v.key == "pd-ratio" and "move P:D from 1:2 to 2:1" in v.line
    p_idle = Figures("p-0", "prefill", "h", 60, waiting=0, running=0)
    d_busy = Figures("d-0", "decode", "h", 60, waiting=9, running=64, kv_usage=0.6)
    (v,) = verdicts(win(p_idle, d_busy, phase=2))
    assert "decode queueing (9 waiting on 1)" in v.line and "to 1:2" in v.line


def test_kv_near_full_or_preemptions_say_what_to_change():
    full = Figures("d-0", "decode", "h", 60, kv_usage=0.95, preemptions=0)
    (v,) = verdicts(win(full, phase=2))
    assert v.key == "kv-pressure" and "KV 95% (near full at >= 90%)" in v.line
    assert "--gpu-memory-utilization" in v.line and "add decode instances" in v.line
    pre = Figures("s-0", "serve", "h", 60, kv_usage=0.5, preemptions=3)
    assert keys(win(pre)) == ["kv-pressure"]
    assert keys(win(Figures("s-0", "serve", "h", 60, kv_usage=0.5, preemptions=0))) == []


def test_decode_computing_prompts_itself_with_no_kv_received_is_kv_transfer_not_working():
    broken = Figures(
        "d-0",
        "decode",
        "h",
        60,
        prompt_by_source={
            "local_compute": 380.0, "local_cache_hit": 4.0, "external_kv_transfer": 0.0,
        },
        connector_errors={"vllm:nixl_num_failed_transfers_total": 4.0},
    )
    suspect, v = verdicts(win(broken, phase=2))
    assert suspect.key == "kv-suspect" and "nixl_num_failed_transfers_total +4" in suspect.line
    assert v.key == "kv-transfer-broken"
    assert "computed 380 of the 380 uncached prompt tokens itself (100% >= 50%), received 0" in (
        v.line
    )
    assert "KV transfer is not working" in v.line and "nixl_num_failed_transfers_total +4" in v.line
    assert keys(win(broken, phase=0)) == []  # no connector in phase 0


def test_an_instance_without_metrics_gives_no_verdict():
    assert verdicts(win(Figures("d-0", "decode", "h", error="no answer"), phase=2)) == []


def phase2_decode(after: str):
    return figures(
        "e2etoppd-decode-0", "decode", "lo1",
        parse((DATA / "phase2-decode-before.prom").read_text(), 0.0),
        parse((DATA / after).read_text(), 46.0),
    )


def test_the_recorded_phase2_window_shows_kv_received_and_no_fallback():
    f = phase2_decode("phase2-decode-after.prom")
    assert f.kv_tokens_received == 192 and f.prompt_by_source["local_compute"] == 0
    assert f.connector_errors == {
        "vllm:nixl_num_failed_notifications_total": 0.0,
        "vllm:nixl_num_failed_transfers_total": 0.0,
        "vllm:nixl_num_kv_expired_reqs_total": 0.0,
        "vllm:nixl_num_notifications_after_expiry_total": 0.0,  # the CPU build 0.32.0 has it
    }
    assert verdicts(win(f, phase=2)) == []


def test_the_fallback_window_says_kv_transfer_is_not_working_with_the_connector_errors():
    """phase2-decode-after-broken.prom: the recorded window edited to the silent fallback
    (tests/top/data/README.md)."""
    suspect, v = verdicts(win(phase2_decode("phase2-decode-after-broken.prom"), phase=2))
    assert suspect.key == "kv-suspect"
    assert suspect.line.startswith("? -> e2etoppd-decode-0: 1 counter event")
    assert v.key == "kv-transfer-broken"
    assert v.line.startswith("e2etoppd-decode-0: computed 192 of the 192 uncached prompt tokens")
    assert "received 0 over the KV connector in 60s" in v.line
    assert v.line.endswith("connector: nixl_num_failed_transfers_total +4")


def test_docs_print_the_threshold_table_as_the_code_has_it():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "top.md").read_text()
    for key, (value, meaning) in THRESHOLDS.items():
        assert f"| `{key}` | {value:g} | {meaning} |" in doc, key


MOONCAKE = Path(__file__).resolve().parents[1] / "fixtures/gpu/vllm023-h100-e/phase2-mooncake"


def mooncake_decode(seconds: float, later: str | None = None) -> Figures:
    """The real decode of Mooncake P/D on an H100 after a burst of 32 stalled: 29 requests
    waiting for KV (`deferred`), none running. `later`: the text of the window's end."""
    text = (MOONCAKE / "metrics-decode.txt").read_text()
    return figures("g2mooncake-decode-0", "decode", "h200b", parse(text, 0.0),
                   parse(later or text, seconds))


def stalled(w: Window) -> list[str]:
    peers = {"prefill": ["g2mooncake-prefill-0"], "decode": ["g2mooncake-decode-0"]}
    return [v.line for v in verdicts(w, peers=peers) if v.key == "kv-transfer-stalled"]


def test_decode_waiting_for_kv_that_never_comes_is_a_stalled_transfer():
    f = mooncake_decode(8.0)
    assert f.kv_waiting == 29 and f.kv_tokens_received == 0 and f.running == 0
    (line,) = stalled(Window("g2mooncake", 2, "hosts", 8.0, (f,)))
    assert line.startswith("g2mooncake-prefill-0 -> g2mooncake-decode-0: 29 requests on "
                           "g2mooncake-decode-0 waited for KV from prefill through the whole 8s")
    assert "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT + 60 s" in line


def test_kv_arriving_a_short_window_or_phase_0_is_no_stall():
    text = (MOONCAKE / "metrics-decode.txt").read_text()
    src = 'source="external_kv_transfer"} 1056.0'
    assert src in text
    arrived = mooncake_decode(8.0, text.replace(src, 'source="external_kv_transfer"} 1312.0'))
    assert arrived.kv_tokens_received == 256
    assert stalled(Window("g2mooncake", 2, "hosts", 8.0, (arrived,))) == []
    assert stalled(Window("g2mooncake", 2, "hosts", 4.0, (mooncake_decode(4.0),))) == []
    assert stalled(Window("g2mooncake", 0, "hosts", 8.0, (mooncake_decode(8.0),))) == []
    # requests that were waiting at the start are gone at the end: nothing waited throughout
    gone = 'vllm:num_requests_waiting_by_reason{engine="0",model_name="qwen3-8b",reason="deferred"}'
    empty = mooncake_decode(8.0, text.replace(f"{gone} 29.0", f"{gone} 0.0"))
    assert empty.kv_waiting == 0
    assert stalled(Window("g2mooncake", 2, "hosts", 8.0, (empty,))) == []
