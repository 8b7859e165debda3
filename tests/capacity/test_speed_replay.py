"""The speed model replayed against real vLLM 0.23.0 runs on an H100 (issue 35): the GPU
harness's speed recordings (tests/fixtures/gpu/vllm023-h100/speed, five models x two workloads x
up to four closed-loop concurrencies; tests/fixtures/gpu/vllm023-h100-c/rates, two models x two
workloads x two Poisson rates, each run twice; dummy weights, prefix cache off) against the
calibration pdctl ships (pdctl/data/speed/h100-sxm-vllm0.23.0.json, fitted by
benchmarks/fit_speed.py on the cells the committed rule did not hold out)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from pdctl.capacity.gpus import GPUS
from pdctl.capacity.params import model_config
from pdctl.capacity.speedcells import cells_of, errors, mape
from pdctl.capacity.steptime import calibration_for

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "tests/fixtures/gpu/vllm023-h100/speed"
RATES = ROOT / "tests/fixtures/gpu/vllm023-h100-c/rates"
# MAPE % bounds: the frozen fit (docs/performance.md: 12.2 / 6.6 / 6.6 fitted, 7.3 / 6.6 / 4.0
# held out) plus a point of slack
FITTED = {"ttft": 13.2, "tpot": 7.6, "throughput": 7.6}
HELD_OUT = {"ttft": 8.3, "tpot": 7.6, "throughput": 5.0}
# the constants pdctl shipped before any measurement (an initial guess for the H200)
GUESS = {"fixed_s": 0.0015, "layer_s": 2e-05, "token_s": 1e-06, "request_s": 0.005,
         "prompt_token_s": 1e-06, "output_token_s": 1e-05, "weights_bw": 0.77, "kv_bw": 0.6,
         "linear_flops": 0.6, "attn_flops": 0.4, "overlap_k": 4.0}


def _cells(folder: Path) -> list:
    out = []
    for path in sorted(folder.glob("*.json")):
        doc = json.loads(path.read_text())
        cfg = json.loads((ROOT / "tests/gpu/models" / doc["model"] / "config.json").read_text())
        out += cells_of(doc, model_config(doc["model"], cfg))
    return out


@pytest.fixture(scope="module")
def cells():
    return _cells(RECORDINGS) + _cells(RATES)


@pytest.fixture(scope="module")
def cal():
    return calibration_for(GPUS["H100-SXM"], "0.23.0")


def split(cells):
    used = [c for c in cells if not c.below_bound]
    return [c for c in used if not c.held_out], [c for c in used if c.held_out]


def within(found: dict[str, float], bound: dict[str, float]) -> bool:
    return all(found[k] <= bound[k] for k in bound)


def test_the_recordings_are_what_the_calibration_says_it_was_fitted_on(cells, cal):
    fit, held = split(cells)
    assert len(cells) == 38 + 16 and len({c.model.name for c in cells}) == 5
    assert cal.provenance["cells_fitted"] == [c.key for c in fit]
    assert cal.provenance["cells_held_out"] == [c.key for c in held]
    assert all(c.gpu == "H100-SXM" and c.engine == "0.23.0" for c in cells)


def test_only_the_dummy_weight_moe_decodes_beat_the_weight_read_bound(cells):
    # DeepSeek-V2-Lite with random weights routes a decode batch to few experts: its step
    # hardly grows with the batch (3.8 ms at 1, 6.2 ms at 128) where reading every expert a
    # random routing touches takes 9.2 ms at the H100's bandwidth
    assert sorted(c.key for c in cells if c.below_bound) == [
        "deepseek-v2-lite/decode/c128", "deepseek-v2-lite/decode/c32",
        "deepseek-v2-lite/decode/c8", "deepseek-v2-lite/prefill/c16"]


def test_the_shipped_constants_replay_the_runs_within_their_bounds(cells, cal):
    fit, held = split(cells)
    assert within(mape(errors(fit, cal)), FITTED), mape(errors(fit, cal))
    assert within(mape(errors(held, cal)), HELD_OUT), mape(errors(held, cal))


def test_the_unmeasured_guess_does_not(cells, cal):
    """The replay tells models apart: the constants shipped before the H100 runs miss the
    same bounds."""
    fit, held = split(cells)
    guess = replace(cal, **GUESS)
    assert not within(mape(errors(fit, guess)), FITTED)
    assert not within(mape(errors(held, guess)), HELD_OUT)


def test_decode_step_time_of_the_dense_models_is_within_ten_percent(cells, cal):
    """TPOT of a decode-heavy closed loop (the batch all decoding): the term the batch and
    packing advice rest on."""
    dense = [c for c in cells if "decode" in c.key and not c.model.is_moe]
    errs = errors(dense, cal)
    assert dense and all(abs(e["tpot"]) <= 0.10 for e in errs.values()), errs


SECOND = ROOT / "tests/fixtures/gpu/vllm023-h100-b"
# The frozen model on recordings it never saw: Mistral-7B and Qwen3-8B run again on another
# H100 machine the day after the fit (docs/performance.md), MAPE % plus a point of slack
SECOND_MACHINE = {"ttft": 14.3, "tpot": 3.8, "throughput": 2.7}


def _second(folder: str) -> list:
    return _cells(SECOND / folder)


def test_the_frozen_model_on_a_second_machine_it_was_not_fitted_on(cal):
    """Sixteen closed-loop cells no fit used (TTFT 13.3%, TPOT 2.8%, throughput 1.7%): TPOT and
    throughput meet the 10% goal, TTFT does not (the closed loop's bursts: see the docs)."""
    second = _second("speed")
    assert len(second) == 16 and not any(c.below_bound for c in second)
    assert not any(p.startswith("tests/fixtures/gpu/vllm023-h100-b")
                   for p in cal.provenance["recordings"])
    found = mape(errors(second, cal))
    assert within(found, SECOND_MACHINE) and found["ttft"] > 10, found


def test_enforce_eager_pays_a_launch_cost_per_layer_and_step(cal):
    """The second sweep's --enforce-eager cells, on the machine that measured them: within 7%
    with the eager term, 22-26% (TPOT) and 24-28% (throughput) off without it."""
    eager = [c for c in _second("sweep") if c.enforce_eager]
    assert len(eager) == 2 and cal.eager_layer_s == pytest.approx(1.1e-4)
    with_term = errors(eager, cal)
    without = errors(eager, replace(cal, eager_layer_s=0.0))
    for c in eager:
        assert abs(with_term[c.key]["tpot"]) < 0.07 and abs(with_term[c.key]["throughput"]) < 0.06
        assert without[c.key]["tpot"] < -0.2 and without[c.key]["throughput"] > 0.2


FRESH = ROOT / "tests/fixtures/gpu/vllm023-h100-d/rates"
# MAPE % bounds on the fresh cells: the model replayed at the times the requests were really
# sent (4.0 / 1.6 / 0.1; at the committed Poisson times 3.8 / 1.6 / 0.1) plus a point of slack;
# the goal is 10
FRESH_BOUND = {"ttft": 5.0, "tpot": 2.6, "throughput": 1.1}


def test_cells_no_fit_ever_saw_are_within_ten_percent(cal):
    """Eight open-loop cells (decode 256/1,024 at 6/s, prefill 4,096/128 at 3/s, 1,024/256 at 6
    and 12/s; Qwen3-8B and Mistral-7B) run on a fourth H100 machine after this calibration and
    its predictions for them were committed: within the goal on every figure."""
    fresh = _cells(FRESH)
    assert len(fresh) == 8 and all(c.held_out for c in fresh)
    assert not {c.key for c in fresh} & set(cal.provenance["cells_fitted"])
    found = mape(errors(fresh, cal))
    assert within(found, FRESH_BOUND), found


def test_without_the_in_flight_step_and_the_api_servers_queue_they_are_not(cal):
    """The two terms the open-loop cells asked for, taken away (replayed at the times the
    requests were really sent: TTFT 4.0% with both): without asynchronous scheduling's wait
    15.4%, without the API server's streaming 6.0%, without either 21.8%."""
    fresh = _cells(FRESH)
    no_lag = [replace(c, async_scheduling=False) for c in fresh]
    quiet = replace(cal, output_token_s=1e-6)
    both = mape(errors(fresh, cal))["ttft"]
    assert mape(errors(no_lag, cal))["ttft"] > 10
    assert mape(errors(fresh, quiet))["ttft"] > both + 1.0
    assert mape(errors(no_lag, quiet))["ttft"] > 20
