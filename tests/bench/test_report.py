"""Report math (plan vs measured), the engine flags of a run, and `--compare` refusing runs
whose engines differ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdctl.bench.load import Step, Workload, bench_args, measured, requests_of, steps
from pdctl.bench.report import (
    capacity,
    compare,
    engine_flags,
    measured_for_ratio,
    predicted,
    ratios,
)
from pdctl.errors import UsageError

PLAN = {
    "traffic": {"promptTokens": 32},
    "pd": {"prefillSecondsPerRequest": 0.0, "batch1TpotMs": 8.0},
    "roles": [
        {"role": "prefill", "replicas": 1, "prefillTokensPerSecond": 640.0,
         "decode": {"tokensPerSecond": 1, "stepMsExpected": 1}},
        {"role": "decode", "replicas": 2,
         "decode": {"tokensPerSecond": 1000.0, "stepMsExpected": 20.0}},
    ],
}
RESULT = {
    "completed": 16, "failed": 0, "duration": 8.0, "total_input_tokens": 512,
    "total_output_tokens": 256, "request_throughput": 2.0, "output_throughput": 32.0,
    "total_token_throughput": 96.0, "request_goodput": 1.5, "max_concurrent_requests": 4,
    "p50_ttft_ms": 100.0, "p90_ttft_ms": 150.0, "p99_ttft_ms": 200.0, "mean_ttft_ms": 110.0,
    "p50_tpot_ms": 40.0, "p90_tpot_ms": 45.0, "p99_tpot_ms": 50.0,
}


def test_capacity_sums_decode_replicas_and_takes_prefill_time():
    cap = capacity(PLAN)
    assert cap == {"ttftMs": 50.0, "tpotMsBatch1": 8.0, "tpotMsBatch": 20.0,
                   "decodeBatch": None, "decodeEngines": 2, "outputThroughput": 2000.0}


def test_prediction_is_capped_by_the_offered_rate_and_ratios_divide():
    m = measured(RESULT)
    pred = predicted(capacity(PLAN), m, output_tokens=16, prompt_tokens=32, offered_rate=2.5)
    assert pred["requestThroughput"] == 2.5  # not the 125/s the decode could take
    assert pred["outputThroughput"] == 40.0 and pred["totalTokenThroughput"] == 120.0
    assert pred["tpotMs"] == 20.0  # four at once: the batched step, not batch 1
    r = ratios({"ttftMs": 100.0, "tpotMs": 40.0, "requestThroughput": 2.0,
                "outputThroughput": 32.0, "totalTokenThroughput": 96.0}, pred)
    assert r == {"ttftMs": 2.0, "tpotMs": 2.0, "requestThroughput": 0.8,
                 "outputThroughput": 0.8, "totalTokenThroughput": 0.8}


def test_one_at_a_time_compares_with_the_batch1_step():
    m = {**measured(RESULT), "maxConcurrentRequests": 1}
    assert predicted(capacity(PLAN), m, 16, 32, None)["tpotMs"] == 8.0


H200 = Path(__file__).resolve().parents[1] / "fixtures/gpu/vllm023-h200/bench"


def test_the_plan_predicts_each_concurrency_of_a_real_h200_bench():
    """`pdctl bench` of Qwen3-8B on an H200 (vLLM 0.23.0, 1,024 in / 256 out, concurrency
    4, 32, 128; a run the plan was not fitted to): the decode step predicted at each step's
    concurrency is within -10%..+30% of the measured TPOT and the closed-loop rate within
    -30%..+10% (the plan's batch-622 figures alone would be 6x and 26x off at concurrency 4)."""
    plan = json.loads((H200 / "plan.json").read_text())
    bench = json.loads((H200 / "bench.json").read_text())
    cap = capacity(plan)
    seen = []
    for step in bench["steps"]:
        c = int(step["load"].removeprefix("concurrency "))
        pred = predicted(cap, step["measured"], 256, 1024, None, c)
        r = ratios(measured_for_ratio(step["measured"]), pred)
        assert 0.9 <= r["tpotMs"] <= 1.3, (c, r)
        assert 0.7 <= r["outputThroughput"] <= 1.1, (c, r)
        seen.append(c)
    assert seen == [4, 32, 128]


def test_measured_reads_the_percentiles_vllm_bench_serve_saves():
    m = measured(RESULT)
    assert m["ttftMs"] == {"mean": 110.0, "p50": 100.0, "p90": 150.0, "p99": 200.0}
    assert (m["completed"], m["requestGoodput"]) == (16, 1.5)


def test_bench_args_carry_the_workload_the_sweep_and_the_slos():
    w = Workload(prompt_tokens=32, output_tokens=16, requests=8, ttft_ms=500, tpot_ms=50)
    args = bench_args(w, Step(concurrency=4), "http://127.0.0.1:8000", "tiny", "/m", "/tmp/r")
    text = " ".join(args)
    for part in ("--dataset-name random", "--random-input-len 32", "--random-output-len 16",
                 "--num-prompts 8", "--max-concurrency 4", "--goodput ttft:500 tpot:50",
                 "--percentile-metrics ttft,tpot,itl,e2el", "--metric-percentiles 50,90,99",
                 "--save-result", "--result-dir /tmp/r"):
        assert part in text
    assert "--request-rate" not in args
    assert steps((1.0, 2.0), (4,)) == [Step(rate=1.0), Step(rate=2.0), Step(concurrency=4)]
    assert requests_of(Workload(duration_s=10), Step(rate=1.5)) == 15


def test_engine_flags_leave_out_host_and_port():
    args = ("serve", "/m", "--port", "8000", "--enforce-eager", "--max-num-seqs=64",
            "--kv-transfer-config", "{}")
    assert engine_flags(args) == {"--enforce-eager": "", "--max-num-seqs": "64",
                                  "--kv-transfer-config": "{}"}


def report(flags: dict, version: str = "0.23.0") -> dict:
    return {"kind": "pdctl-bench", "specHash": "x",
            "engines": [{"role": "decode", "flags": flags, "version": version}],
            "steps": [{"load": "concurrency 4", "measured": measured(RESULT)}]}


def test_compare_refuses_runs_whose_flags_differ_and_names_the_flag():
    """The CUDA-graph trap: one arm ran eager."""
    with pytest.raises(UsageError) as err:
        compare(report({"--enforce-eager": ""}), report({}), allow_flag_diff=False)
    assert "decode: --enforce-eager only in A" in str(err.value)
    doc = compare(report({"--enforce-eager": ""}), report({}), allow_flag_diff=True)
    assert doc["flagDifferences"] == ["decode: --enforce-eager only in A"]


def test_compare_refuses_other_engine_versions_and_divides_the_same_steps():
    with pytest.raises(UsageError, match="engine version 0.23.0 in A, 0.33.0 in B"):
        compare(report({}), report({}, "0.33.0"), allow_flag_diff=False)
    doc = compare(report({}), report({}), allow_flag_diff=False)
    row = next(r for r in doc["rows"] if r["figure"] == "TTFT p50 ms")
    assert (row["a"], row["b"], row["bOverA"]) == (100.0, 100.0, 1.0)
