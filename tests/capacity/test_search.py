"""`pdctl plan --search` (pdctl.capacity.search): the engine settings it ranks, and whether its
pick serves the recorded H100 sweeps nearly as well as the best configuration measured there
(issue 35's config quality): Qwen3-8B, each configuration measured on a decode-heavy and a
prefill-heavy cell, on two H100 machines on two days (tests/fixtures/gpu/vllm023-h100/sweep:
six configurations; vllm023-h100-b/sweep: ten, every --search candidate but max-num-seqs 512,
plus --enforce-eager)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pdctl.bench.report import KIND, measured_for_ratio, ratios
from pdctl.bench.tune import propose, settings
from pdctl.capacity.atload import LoadSpec, predict_step
from pdctl.capacity.search import AS_SPEC, CANDIDATES, NUMERICS, search, variants
from pdctl.inputs import capacity_plan, read_spec
from tests.helpers import cli, written

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = {"h100-a": ROOT / "tests/fixtures/gpu/vllm023-h100/sweep",
          "h100-b": ROOT / "tests/fixtures/gpu/vllm023-h100-b/sweep"}
CONFIG = ROOT / "tests/gpu/models/qwen3-8b/config.json"
# the sweep's labels as the flags --search names them
AS_FLAGS = {"base": AS_SPEC, "fp8kv": NUMERICS, "seqs64": "--max-num-seqs 64",
            "mbt2048": "--max-num-batched-tokens 2048",
            "mbt16384": "--max-num-batched-tokens 16384", "eager": None,
            "mbt4096": "--max-num-batched-tokens 4096", "seqs128": "--max-num-seqs 128",
            "seqs256": "--max-num-seqs 256", "util095": "--gpu-memory-utilization 0.95"}
TTFT_MS, TPOT_MS = 1000, 30


def _recorded(sweep: str = "h100-a") -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(SWEEPS[sweep].glob("*.json"))}


def _measured(sweep: str, workload: str) -> dict[str, float]:
    """Goodput of every recorded configuration on WORKLOAD, by its --search label."""
    return {AS_FLAGS[label]: _measured_goodput(doc["cells"][key])
            for label, doc in _recorded(sweep).items() if AS_FLAGS[label]
            for key in doc["cells"] if f"/{workload}/" in key}


def _spec_text(prompt: int, output: int) -> str:
    spec = _recorded()["base"]["spec"]
    spec["model"]["config"] = str(CONFIG)
    spec["workload"] = {"promptTokens": prompt, "outputTokens": output, "ttftMs": TTFT_MS,
                        "tpotMs": TPOT_MS}
    return yaml.safe_dump(spec, sort_keys=False)


def _ranked(prompt: int, output: int, concurrency: int) -> list:
    spec, source = read_spec([(_spec_text(prompt, output), "/tmp/sweep.yaml")])
    return search(spec, lambda v: capacity_plan(v, source, "/tmp/sweep.yaml")[0],
                  LoadSpec(concurrency=concurrency))


def _measured_goodput(cell: dict) -> float:
    """Requests of the cell meeting both SLOs per second (benchmarks/sweep_quality.py)."""
    ok = sum(1 for _, ttft, e2e, n in cell["raw"]
             if ttft <= TTFT_MS and (n < 2 or (e2e - ttft) / (n - 1) <= TPOT_MS))
    return ok / cell["wall_s"]


def test_variants_are_single_changes_the_spec_does_not_already_have() -> None:
    spec, _ = read_spec([(_spec_text(256, 1024), "/tmp/s.yaml")])
    labels = [label for label, _ in variants(spec)]
    assert labels[0] == AS_SPEC and NUMERICS in labels and len(labels) == len(set(labels))
    changed = spec.model_copy(update={"serve": spec.serve.model_copy(
        update={"max_num_seqs": 256, "gpu_memory_utilization": 0.95})})
    again = [label for label, _ in variants(changed)]
    assert "--max-num-seqs 256" not in again and "--gpu-memory-utilization 0.95" not in again
    fp8 = dict(variants(spec))[NUMERICS]
    assert fp8.model.kv_cache_dtype == "fp8" and spec.model.kv_cache_dtype == "auto"


def test_the_second_sweep_measured_every_candidate_but_one() -> None:
    measured = _measured("h100-b", "decode")
    assert len(measured) == 9 and set(measured) == {AS_SPEC} | {
        label for label, _, _ in CANDIDATES} - {"--max-num-seqs 512"}
    assert set(_measured("h100-b", "prefill")) == set(measured)


@pytest.mark.parametrize("sweep", list(SWEEPS))
@pytest.mark.parametrize("workload, prompt, output, concurrency",
                         [("decode", 256, 1024, 128), ("prefill", 4096, 128, 16)])
def test_the_pick_is_within_ten_percent_of_the_best_measured(sweep, workload, prompt, output,
                                                             concurrency) -> None:
    """Of the configurations a sweep measured, the best one by --search's ranking reaches at
    least 0.9 of the best measured goodput: fp8 KV on both cells of both sweeps (decode 1.00
    and 1.00; prefill 0.93 and 0.93, where the measured best is max-num-batched-tokens 2048).
    The worst measured one is ranked below the pick (seqs64 on decode, mbt16384 on prefill)."""
    ranked = [t.label for t in _ranked(prompt, output, concurrency)]
    measured = _measured(sweep, workload)
    pick = next(label for label in ranked if label in measured)
    assert measured[pick] >= 0.9 * max(measured.values()), (pick, measured)
    worst = min(measured, key=measured.__getitem__)
    assert ranked.index(worst) > ranked.index(pick)


def test_cli_search_table_json_and_refusals(tmp_path: Path) -> None:
    path = written(tmp_path / "s.yaml", _spec_text(256, 1024))
    out, _ = cli(["plan", str(path), "--load", "concurrency=128", "--search", "-o", "json"], 0)
    found = json.loads(out)["search"]
    assert found["load"] == "concurrency=128" and found["recommended"] == NUMERICS
    assert found["ranked"][0]["note"] == "changes numerics"
    out, _ = cli(["plan", str(path), "--load", "concurrency=128", "--search"], 0)
    assert "recommended: --kv-cache-dtype fp8" in out and "over the spec's settings" in out
    _, err = cli(["plan", str(path), "--search"], 2)
    assert "--search ranks engine settings at a load" in err
    bare = written(tmp_path / "b.yaml", _spec_text(256, 1024).replace("ttftMs: 1000", "")
                   .replace("tpotMs: 30", ""))
    _, err = cli(["plan", str(bare), "--load", "concurrency=8", "--search"], 2)
    assert "needs a latency target" in err
    _, err = cli(["plan", str(ROOT / "examples/cpu-quickstart.yaml"), "--load", "concurrency=4",
                  "--ttft-ms", "1000", "--search"], 2)
    assert "engine.device is cpu" in err


def _one_bench(workload: str, prompt: int, output: int, concurrency: int,
               sweep: str = "h100-a") -> dict:
    """The sweep's `base` cell of WORKLOAD as `pdctl bench -o json` reports a step: measured
    p50s, the plan's prediction of that step and their ratio (pdctl.bench.run)."""
    cell = next(c for k, c in _recorded(sweep)["base"]["cells"].items() if f"/{workload}/" in k)
    spec, source = read_spec([(_spec_text(prompt, output), "/tmp/sweep.yaml")])
    plan = capacity_plan(spec, source, "/tmp/sweep.yaml")[0]
    measured = {"ttftMs": cell["ttft_ms"], "tpotMs": cell["tpot_ms"], "itlMs": cell["itl_ms"],
                "outputThroughput": cell["output_tok_s"], "requestThroughput": cell["request_s"]}
    predicted = predict_step(plan, cell["requests"], concurrency, None)
    return {
        "workload": {"promptTokens": prompt, "outputTokens": output, "ttftMs": TTFT_MS,
                     "tpotMs": TPOT_MS},
        "steps": [{"load": f"concurrency {concurrency}", "measured": measured,
                   "predicted": predicted,
                   "ratio": ratios(measured_for_ratio(measured), predicted),
                   "metrics": {"instances": []}}],
    }


@pytest.mark.parametrize("sweep", list(SWEEPS))
@pytest.mark.parametrize("workload, prompt, output, concurrency, rules, want",
                         [("decode", 256, 1024, 128, [], {"h100-a": NUMERICS,
                                                          "h100-b": NUMERICS}),
                          ("prefill", 4096, 128, 16, [("serve", "replicas")],
                           {"h100-a": "--max-num-batched-tokens 2048", "h100-b": NUMERICS})])
def test_tunes_pick_after_one_bench_is_within_ten_percent_of_the_best(
        sweep, workload, prompt, output, concurrency, rules, want) -> None:
    """`pdctl tune` after one bench of the spec's own settings (the sweep's `base` cell): the
    rules change no engine setting (prefill: TTFT p90 1.46 s over the 1 s target asks for a
    second replica), and the speed model, its TTFT and TPOT scaled by what that bench
    measured over what it predicted, proposes one settings change.
    Its measured goodput is at least 0.9 of the best configuration measured. First sweep:
    decode fp8 KV, 1.00; prefill max-num-batched-tokens 2048, 1.00, where `plan --search`
    from the spec alone picks fp8 KV, 0.93: the bench's TTFT x1.43 makes shorter chunks worth
    it; keeping the spec's settings scores 0.89 and 0.58. Second sweep: fp8 KV on both, 1.00
    and 0.93 (its base bench's TTFT was closer to the model's); the spec's settings 0.88 and
    0.96."""
    spec, source = read_spec([(_spec_text(prompt, output), "/tmp/sweep.yaml")])
    report = _one_bench(workload, prompt, output, concurrency, sweep)
    data = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert [p.path for p in propose(data, report)] == rules

    def rank(load, ttft_scale, tpot_scale):
        return search(spec, lambda v: capacity_plan(v, source, "/tmp/sweep.yaml")[0], load,
                      (ttft_scale, tpot_scale))

    picked = settings(data, report, rank)
    assert picked is not None and picked.rule == "engine settings"
    by_change = {(f.split(".")[-1].replace("_", ""), v): label for label, f, v in CANDIDATES}
    label = by_change[(picked.path[-1].lower(), picked.value)]
    assert label == want[sweep], picked
    measured = _measured(sweep, workload)
    assert measured[label] >= 0.9 * max(measured.values()), (label, measured)
    if sweep == "h100-a":  # keeping the spec's would have failed here (0.89, 0.58)
        assert measured[AS_SPEC] < 0.9 * max(measured.values())


def test_cli_tune_proposes_the_settings_with_their_evidence(tmp_path: Path) -> None:
    """`pdctl tune SPEC --from BENCH.json` on the decode bench above: the overlay sets the KV
    cache dtype, the evidence names the scaling and says it changes numerics, and the render
    diff shows the flag."""
    path = written(tmp_path / "s.yaml", _spec_text(256, 1024))
    bench = {"kind": KIND, **_one_bench("decode", 256, 1024, 128)}
    report = written(tmp_path / "bench.json", json.dumps(bench))
    out, _ = cli(["tune", str(path), "--from", str(report), "-o", "json"], 0)
    found = json.loads(out)
    assert found["overlay"] == {"model": {"kvCacheDtype": "fp8"}}
    (p,) = found["proposals"]
    assert (p["path"], p["from"], p["rule"]) == ("model.kvCacheDtype", "auto", "engine settings")
    assert "scaled to this bench (TTFT x" in p["evidence"]
    assert "changes numerics" in p["evidence"]
    assert any(line.startswith("+") and "--kv-cache-dtype" in line for line in found["diff"])
