"""The step model and the scheduler simulation behind `pdctl plan --load` (pure)."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from pdctl.capacity.fit import Shape
from pdctl.capacity.gpus import GPUS
from pdctl.capacity.params import model_config
from pdctl.capacity.simulate import Load, simulate
from pdctl.capacity.steptime import calibration_for, calibrations, engine_for

MODELS = Path(__file__).resolve().parents[1] / "gpu" / "models"
H200 = GPUS["H200"]


def model(name: str):
    return model_config(name, json.loads((MODELS / name / "config.json").read_text()))


def engine(name: str = "qwen3-8b", **cal):
    base = calibration_for(H200, "0.23.0")
    return engine_for(model(name), H200, Shape(gpu="H200", engine="0.23.0", max_model_len=8192),
                      cal=replace(base, **cal) if cal else base)


def test_every_calibration_names_its_gpu_version_and_constants():
    cals = calibrations()
    assert cals, "pdctl/data/speed/ ships no calibration"
    for c in cals:
        assert c.gpu in GPUS and c.engine.count(".") == 2
        assert 0 < c.weights_bw <= 1 and 0 < c.kv_bw <= 1 and 0 < c.linear_flops <= 1


def test_a_gpu_without_calibration_is_extrapolated_and_says_from_which():
    cal = calibration_for(H200, "0.23.0")
    assert cal.extrapolated_from == "H100-SXM"
    assert "extrapolated from H100-SXM" in cal.basis
    own = calibration_for(GPUS["H100-SXM"], "0.23.0")
    assert own.fitted and own.extrapolated_from is None
    assert own.basis == "calibrated on H100-SXM (vLLM 0.23.0)"


def test_one_request_alone_waits_its_prefill_then_one_step_a_token():
    e = engine()
    r = simulate(e, Load(1000, 11, 1, concurrency=1), 8192, 256)
    prefill = e.step_s(0, 0, ((1000, 0),))
    # the API server takes it in, the step runs, the API server streams its one token back
    front = e.cal.request_s + 1000 * e.cal.prompt_token_s
    assert r.ttft_s[0] == pytest.approx(front + prefill + e.cal.output_token_s)
    # ten decode steps after the first token, context 1001 .. 1010
    steps = sum(e.step_s(1, 1000 + i) for i in range(1, 11))
    assert r.e2e_s[0] - r.ttft_s[0] == pytest.approx(steps)
    assert r.tpot_s[0] == pytest.approx(steps / 10)


def test_a_prompt_longer_than_the_budget_is_prefilled_in_chunks():
    e = engine()
    one = simulate(e, Load(4096, 2, 1, concurrency=1), 8192, 256)
    chunked = simulate(e, Load(4096, 2, 1, concurrency=1), 1024, 256)
    # four chunks of 1,024: four fixed costs and more attention against the earlier chunks
    assert chunked.ttft_s[0] > one.ttft_s[0]
    assert len(chunked.steps) == len(one.steps) + 3


def test_a_closed_loop_keeps_its_concurrency_and_counts_every_request():
    e = engine()
    r = simulate(e, Load(256, 64, 40, concurrency=8), 8192, 256)
    assert len(r.e2e_s) == 40 and r.max_running == 8
    assert r.output_tokens == 40 * 64
    s = r.summary()
    assert s["outputThroughput"] == pytest.approx(40 * 64 / r.wall_s, rel=1e-3)


def test_more_concurrency_more_throughput_and_slower_tokens():
    e = engine()
    low = simulate(e, Load(256, 256, 32, concurrency=1), 8192, 256).summary()
    high = simulate(e, Load(256, 256, 256, concurrency=64), 8192, 256).summary()
    assert high["outputThroughput"] > 10 * low["outputThroughput"]
    assert high["tpotMs"]["p50"] > low["tpotMs"]["p50"]


def test_max_num_seqs_and_the_kv_cache_bound_what_runs_at_once():
    e = engine()
    assert simulate(e, Load(256, 32, 64, concurrency=64), 8192, 16).max_running == 16
    # room for 10 whole requests of 256 + 32 tokens
    assert simulate(e, Load(256, 32, 64, concurrency=64), 8192, 256, 2880).max_running == 10


def test_poisson_arrivals_below_capacity_do_not_queue():
    e = engine()
    r = simulate(e, Load(512, 64, 200, rate=2.0, seed=3), 8192, 256).summary()
    assert r["requestThroughput"] == pytest.approx(2.0, rel=0.25)
    alone = simulate(e, Load(512, 64, 1, concurrency=1), 8192, 256).summary()
    assert r["ttftMs"]["p50"] < 2 * alone["ttftMs"]["p50"]


def test_recorded_arrival_times_are_replayed_as_given():
    """An open-loop recording's send times replace the Poisson draw: the same 40 requests sent
    all within 10 ms queue behind each other's prefills, spread over 20 s they do not."""
    e = engine()
    burst = Load(4096, 16, 40, rate=2.0, arrivals=tuple(i * 0.00025 for i in range(40)))
    spread = Load(4096, 16, 40, rate=2.0, arrivals=tuple(i * 0.5 for i in range(40)))
    b, s = (simulate(e, x, 8192, 256) for x in (burst, spread))
    assert max(b.ttft_s) > 10 * max(s.ttft_s)
    assert s.wall_s == pytest.approx(19.5 + max(s.e2e_s), rel=0.05)  # the last sent at 19.5 s


def test_a_request_reaching_a_busy_engine_waits_for_the_step_after_next():
    """Asynchronous scheduling (0.23's default) plans step N+1 when step N starts: a request
    arriving mid-step misses the step already planned. Without it, it joins the next step."""
    cal = dict(request_s=0.0, prompt_token_s=0.0, output_token_s=0.0)
    e = engine(**cal)
    step = e.step_s(1, 2000)
    # one request decoding 512 tokens from t=0; the second arrives a third into a decode step
    first_token = e.step_s(0, 0, ((2000, 0),))
    at = first_token + 10 * step + step / 3
    load = Load(2000, 512, 2, rate=1.0, arrivals=(0.0, at))
    lagged = simulate(e, load, 8192, 256)
    eager = simulate(
        engine_for(e.model, H200, replace(e.shape, async_scheduling=False), cal=e.cal),
        load, 8192, 256)
    own = e.step_s(1, 2011, ((2000, 0),))  # its prefill beside the other's decode
    assert eager.ttft_s[1] == pytest.approx(2 / 3 * step + own, rel=0.02)
    assert lagged.ttft_s[1] == pytest.approx(2 / 3 * step + step + own, rel=0.02)
    # (an idle engine takes a request at once: test_one_request_alone_waits_its_prefill_...)


def test_the_api_server_streams_tokens_and_takes_requests_in_one_after_another():
    """One event loop: each step's tokens cost it output_token_s apiece, and a request's first
    token reaches its client only after the whole step's are out. Past what it can stream,
    it and not the GPU sets the pace of every token."""
    quick = engine(output_token_s=1e-6)
    slow = engine(output_token_s=2e-4)
    load = Load(256, 128, 64, concurrency=64)
    fast_r, slow_r = (simulate(x, load, 8192, 256) for x in (quick, slow))
    step = quick.step_s(64, 64 * 320)
    assert 64 * 2e-4 > step  # 12.8 ms of streaming per step: more than the step itself
    assert statistics.median(fast_r.tpot_s) < 0.7 * 64 * 2e-4  # the GPU's pace
    assert statistics.median(slow_r.tpot_s) == pytest.approx(64 * 2e-4, rel=0.1)
    # open loop, below its limit: a lone prefill's first token waits for the step's others
    busy = Load(256, 512, 40, rate=8.0, seed=1)
    t_quick, t_slow = (statistics.median(simulate(x, busy, 8192, 256).ttft_s)
                       for x in (quick, slow))
    assert t_slow - t_quick > 5 * 2e-4
    # ITL is the gap between two deliveries of tokens: with streaming the bottleneck it moves
    # with TPOT, not with the GPU's steps
    s = slow_r.summary()
    assert s["itlMs"]["mean"] == pytest.approx(s["tpotMs"]["mean"], rel=0.1)


def test_a_decode_instance_of_pd_gets_its_requests_prefilled():
    e = engine()
    r = simulate(e, Load(4096, 16, 4, concurrency=1), 8192, 256, prefilled=True)
    front = e.cal.request_s + 4096 * e.cal.prompt_token_s
    # the API server's intake, after streaming the last token of the request before
    assert all(front <= t <= front + 2 * e.cal.output_token_s + 1e-9 for t in r.ttft_s)
    assert len(r.steps) == 4 * 15  # no prefill step: 15 decode steps each


def test_moe_reads_more_experts_as_the_batch_grows_and_mla_reads_its_latent():
    moe = engine("qwen3-30b-a3b")
    assert moe.step_s(64, 64 * 300) / moe.step_s(1, 300) > 2  # experts touched: 8 -> most
    dense = engine("qwen3-8b")
    dense_growth = dense.step_s(64, 64 * 300) / dense.step_s(1, 300)
    assert dense_growth < moe.step_s(64, 64 * 300) / moe.step_s(1, 300)
    mla = engine("deepseek-v2-lite")
    assert mla.kv_bytes < dense.kv_bytes


def test_a_spec_that_turns_async_scheduling_off_is_modelled_without_the_wait():
    from pdctl.capacity import spec_shape
    from pdctl.spec import load_text

    base = (Path(__file__).resolve().parents[1] / "fixtures/speed/search-qwen3-8b.yaml")
    text = base.read_text()
    spec = load_text(text, "spec.yaml")[0]
    assert spec_shape(spec, "serve").async_scheduling
    role = text + "serve: {extraArgs: [--no-async-scheduling]}\n"
    engine = text.replace('engine: {version: "0.23.0"}',
                          'engine: {version: "0.23.0", extraArgs: [--no-async-scheduling]}')
    assert engine != text
    older = text.replace('version: "0.23.0"', 'version: "0.10.1"')
    assert older != text
    for off in (role, engine, older):
        assert not spec_shape(load_text(off, "spec.yaml")[0], "serve").async_scheduling
    asked = older + "serve: {extraArgs: [--async-scheduling]}\n"
    assert spec_shape(load_text(asked, "spec.yaml")[0], "serve").async_scheduling


def test_unstreamed_requests_cost_the_api_server_no_streaming():
    """A plain /v1/completions request is answered once at the end: the per-token streaming
    cost that slows a streamed batch past what the API server can write does not apply."""
    e = engine(output_token_s=2e-4)
    streamed = simulate(e, Load(256, 128, 128, concurrency=128), 8192, 256).summary()
    plain = simulate(e, Load(256, 128, 128, concurrency=128, stream=False), 8192, 256).summary()
    assert plain["outputThroughput"] > 1.5 * streamed["outputThroughput"]
    assert plain["outputThroughput"] == pytest.approx(
        simulate(engine(output_token_s=0.0), Load(256, 128, 128, concurrency=128), 8192,
                 256).summary()["outputThroughput"], rel=0.01)
