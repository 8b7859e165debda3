"""`pdctl plan SPEC --from-log vllm.log`: vLLM's start-up lines, predicted vs observed."""

from __future__ import annotations

import json
from pathlib import Path

from pdctl.capacity.fromlog import parse_log
from tests.capacity.conftest import serve_spec
from tests.helpers import cli, run_cli, written

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "capacity"

# vLLM 0.10.1 (V1) start-up lines, one Qwen2-7B on an A100-80GB at util 0.5 (the shape of
# dennislee22/vLLM-benchmarking log/vllm-7B-1gpuA10080GB-0.5GRAM.log), lines trimmed.
V1_LOG = (FIXTURES / "from-log-v1.log").read_text()

# V0 (0.7/0.8) prints one summary per worker; vLLM sizes the cache by the smallest.
V0_LOG = (FIXTURES / "from-log-v0.log").read_text()

SPEC = serve_spec("Qwen/Qwen2-7B-Instruct", 16384, tail="hardware: {gpu: A100-80GB}\n",
                  serve="replicas: 1, tensorParallel: 1, gpuMemoryUtilization: 0.5")


def test_parse_v1_lines() -> None:
    seen = parse_log(V1_LOG)
    assert seen.version == "0.10.1.1" and seen.util == 0.5 and seen.max_model_len == 16384
    assert seen.max_num_batched_tokens == 2048
    assert (seen.weights_gib, seen.kv_available_gib, seen.kv_tokens) == (14.2488, 24.83, 464848)
    assert seen.graphs_actual_gib == 0.5 and not seen.empty


def test_parse_v0_summary_takes_the_smallest_worker() -> None:
    seen = parse_log(V0_LOG)
    assert (seen.total_gib, seen.util) == (39.38, 0.95)
    assert seen.kv_available_gib == 31.21  # the smaller of the two workers
    assert seen.activation_gib == 2.51 and seen.non_torch_gib == 0.34
    assert seen.kv_tokens == 1395 * 16  # V0 prints blocks of 16 tokens


def test_parse_033_one_line_capacity_and_startup_summary() -> None:
    # vLLM 0.33 prints capacity and concurrency on one line, and a start-up summary
    text = (
        "INFO [gpu_worker.py:789] Free memory on device (30.27/31.4 GiB) on startup. "
        "Desired GPU memory utilization is (0.92, 28.88 GiB). Actual usage is 15.03 GiB "
        "for consumed memory (weights + non-torch), 1.59 GiB for peak activation, and "
        "0.09 GiB for CUDAGraph memory.\n"
        "INFO [kv_cache_utils.py:1148] GPU KV cache size: 619,202 tokens, Maximum "
        "concurrency for 262,144 tokens per request: 2.36x\n"
    )
    seen = parse_log(text)
    assert (seen.total_gib, seen.util, seen.activation_gib, seen.graphs_gib) == (
        31.4, 0.92, 1.59, 0.09,
    )
    assert seen.kv_tokens == 619202


def test_plan_from_log_shows_each_term(capsys, tmp_path: Path) -> None:
    spec, log = tmp_path / "s.yaml", tmp_path / "vllm.log"
    spec.write_text(SPEC)
    log.write_text(V1_LOG)
    out, err = cli(["plan", str(spec), "--from-log", str(log)])
    assert "predicted vs the log (serve, vLLM 0.10.1.1)" in out
    for term in (
        "weights", "activation", "non-torch", "CUDA graphs", "KV cache memory",
        "KV cache size (vLLM's count)",
    ):
        assert term in out
    assert "464,848" in out and "CUDA graphs captured after the KV cache: 0.50 GiB" in out


def test_plan_from_log_json_predicts_under_the_logs_conditions(capsys, tmp_path: Path) -> None:
    spec, log = tmp_path / "s.yaml", tmp_path / "vllm.log"
    spec.write_text(SPEC.replace("gpuMemoryUtilization: 0.5", "gpuMemoryUtilization: 0.9"))
    log.write_text(V1_LOG)
    out, err = cli(["plan", str(spec), "-o", "json", "--from-log", str(log)])
    data = json.loads(out)["fromLog"]
    assert "gpuMemoryUtilization: plan 0.9, log 0.5" in data["conditions"]
    assert any(c.startswith("vLLM: plan 0.33.0, log 0.10.1.1") for c in data["conditions"])
    terms = {t["term"]: t for t in data["terms"]}
    assert terms["KV cache size (vLLM's count)"]["observed"] == 464848
    assert terms["weights"]["observed"] == 14.25
    # predicted at util 0.5 (the log's), not the spec's 0.9: within 5% of what vLLM printed
    assert abs(terms["KV cache memory"]["errorPct"]) < 5, terms
    assert data["observedUnderPlan"]["kvAvailableGib"] == 24.83


def test_from_log_errors_are_one_line(capsys, tmp_path: Path) -> None:
    spec = written(tmp_path / "s.yaml", SPEC)
    code, _, err = run_cli(["plan", str(spec), "--from-log", str(tmp_path / "nope.log")], capsys)
    assert code == 2 and err.count("\n") == 1 and "--from-log: cannot read" in err
    empty = written(tmp_path / "other.log", "INFO something else entirely\n")
    code, _, err = run_cli(["plan", str(spec), "--from-log", str(empty)], capsys)
    assert code == 2 and "has none of vLLM's start-up memory lines" in err


def test_from_log_reads_which_sampler_the_engine_profiled(capsys, tmp_path: Path) -> None:
    # "FlashInfer is not available" (a pip install of 0.10): the sampler profile sorts, so
    # the prediction under the log's conditions has the larger activation term
    assert parse_log(V1_LOG).flashinfer_sampler is None
    with_fi = V1_LOG + (
        "(EngineCore_0 pid=2881) INFO 09-04 01:29:01 [topk_topp_sampler.py:50] Using FlashInfer "
        "for top-p & top-k sampling.\n"
    )
    without = V1_LOG + (
        "(EngineCore_0 pid=2881) WARNING 09-04 01:29:01 [topk_topp_sampler.py:61] FlashInfer is "
        "not available. Falling back to the PyTorch-native implementation of top-p & top-k "
        "sampling. For the best performance, please install FlashInfer.\n"
    )
    assert parse_log(with_fi).flashinfer_sampler is True
    assert parse_log(without).flashinfer_sampler is False
    spec = written(tmp_path / "s.yaml", SPEC)
    activation = {}
    for name, text in (("fi", with_fi), ("native", without)):
        log = written(tmp_path / f"{name}.log", text)
        out, err = cli(["plan", str(spec), "-o", "json", "--from-log", str(log)])
        data = json.loads(out)["fromLog"]
        terms = {t["term"]: t for t in data["terms"]}
        activation[name] = terms["activation (profile peak)"]["predicted"]
        if name == "native":
            assert (
                "sampler profile: plan FlashInfer only, log sorted (no FlashInfer)"
                in (data["conditions"])
            )
        else:  # the log matches what pdctl assumes for 0.10 (the vllm-openai image)
            assert abs(terms["KV cache memory"]["errorPct"]) < 1, terms
    assert activation["native"] > 2 * activation["fi"]


def test_an_unreadable_log_is_refused_before_the_plan_is_printed(tmp_path: Path) -> None:
    spec = written(tmp_path / "s.yaml", SPEC)
    code, out, err = run_cli(["plan", str(spec), "--from-log", str(tmp_path / "nope.log")])
    assert code == 2 and out == "" and "--from-log: cannot read" in err


MISTRAL_LOG = Path(__file__).resolve().parents[1] / "fixtures/vllm/h200-0.23/mistral-7b-u0.6.log"
QWEN3 = serve_spec("Qwen/Qwen3-8B", 4096, tail="hardware: {gpu: H200}\n",
                   serve="replicas: 1, tensorParallel: 1, gpuMemoryUtilization: 0.6")


def test_a_log_of_another_model_is_named_and_not_scored(tmp_path: Path) -> None:
    spec = written(tmp_path / "s.yaml", QWEN3)
    out, _ = cli(["plan", str(spec), "--from-log", str(MISTRAL_LOG)])
    flat = " ".join(out.split("predicted vs the log")[0].split()[-40:])
    assert "note: the log is of another model (/root/models/mistral-7b) than the plan's " \
           "(Qwen/Qwen3-8B)" in flat
    assert "%" not in out.split("predicted vs the log")[1].split("predicted under")[0]
    data = json.loads(cli(["plan", str(spec), "-o", "json", "--from-log", str(MISTRAL_LOG)])[0])
    log = data["fromLog"]
    assert log["otherModel"] is True
    assert log["conditions"][0] == "model: plan Qwen/Qwen3-8B, log /root/models/mistral-7b"
    assert all(t["errorPct"] is None for t in log["terms"])


def test_a_local_path_of_the_same_model_is_the_same_model() -> None:
    from pdctl.capacity.fromlog import other_model

    assert other_model("Qwen/Qwen3-8B", "/models/Qwen3-8B") is False
    assert other_model("mistralai/Mistral-7B-Instruct-v0.3", "/root/models/mistral-7b") is False
    assert other_model("Qwen/Qwen3-8B", "/root/models/mistral-7b") is True
    assert other_model("Qwen/Qwen3-8B", None) is None
