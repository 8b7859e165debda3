"""`pdctl plan SPEC`: a table and JSON for every example; located one-line errors."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pdctl.capacity import spec_gpu, spec_traffic
from pdctl.cli.plan_table import _params
from pdctl.errors import SpecError
from pdctl.spec.workload import Hardware, Workload
from tests.helpers import cli, run_cli, written

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))

SPEC = """\
name: demo
model:
  name: {model}
  maxModelLen: 8192{extra}
hosts:
  - name: gpu-a
    address: 10.0.0.10
    gpus: [0, 1]
serve:
  replicas: 1
  tensorParallel: 2
"""


run = run_cli


def test_there_are_examples_of_every_phase() -> None:
    assert {p.name.split("-")[0] for p in EXAMPLES} >= {"phase0", "phase1"}


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_plan_prints_a_table_for_every_example(example: Path, capsys) -> None:
    out, err = cli(["plan", str(example)])
    if example.name.startswith("cpu-"):  # no GPU tables: test_plan_on_a_cpu_spec_...
        assert "GPU capacity planning does not apply" in out
        return
    assert "KV cache tokens" in out and "--gpu-memory-utilization" in out
    assert "how each figure is made: pdctl plan -o wide" in out
    assert "packing advice" in out
    # P:D only where prefill and decode are separate roles (phases 2 and 3)
    assert ("P:D" in out) == example.name.startswith(("phase2", "phase3"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_plan_json_for_every_example(example: Path, capsys) -> None:
    out, err = cli(["plan", str(example), "--output", "json", "--gpu", "H200"])
    data = json.loads(out)
    assert data["gpu"]["name"] == "H200"
    roles = {r["role"]: r for r in data["roles"]}
    assert set(roles) in ({"serve"}, {"prefill", "decode"})
    for role in roles.values():
        assert role["kvBytesPerToken"] > 0 and role["weightsBytesPerGpu"] > 0
        assert role["kvTokens"] % 16 == 0
        assert 0 < role["gpuMemoryUtilization"] <= 1
    if "slice" in roles.get("decode", {}):
        sl = roles["decode"]["slice"]
        assert sl["sliceMib"] * sl["perGpu"] <= data["gpu"]["memoryMib"]
        assert sl["gpuMemoryUtilization"] == roles["decode"]["gpuMemoryUtilization"]
    assert data["advice"]["case"] in (
        "busy", "low-traffic", "kv-limited", "unknown-traffic", "moderate",
    )


def test_workload_options_give_instance_counts(capsys, tmp_path: Path) -> None:
    spec = ROOT / "examples" / "phase2-nixl-hosts.yaml"  # prefill and decode instances
    code, out, err = run(
        [
            "plan", str(spec), "-o", "json", "--gpu", "H100", "--rate", "20", "--prompt-tokens",
            "2000", "--output-tokens", "500", "--tpot-ms", "30", "--ttft-ms", "500",
        ],
        capsys,
    )
    assert code == 0, err
    pd = json.loads(out)["pd"]
    assert pd["prefillInstances"] >= 1 and pd["decodeInstances"] >= 1
    assert pd["decodeConcurrency"] > 0 and pd["ttftOk"] is True
    role = json.loads(out)["roles"][1]
    assert role["role"] == "decode" and role["decode"]["stepMsExpected"] <= 30


def test_model_config_file_relative_to_the_spec(capsys, tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(
        json.dumps(
            {
                "num_hidden_layers": 10, "hidden_size": 1024, "num_attention_heads": 8,
                "num_key_value_heads": 2, "intermediate_size": 4096, "vocab_size": 32000,
            }
        )
    )
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(model="acme/tiny", extra="\n  config: m/config.json"))
    out, err = cli(["plan", str(spec), "-o", "json"])
    role = json.loads(out)["roles"][0]
    assert role["kvBytesPerToken"] == 2 * 10 * 1 * 128 * 2  # 2 KV heads / TP 2 = 1 per GPU
    assert json.loads(out)["model"]["source"] == "config"


def test_unknown_model_is_one_located_line(capsys, tmp_path: Path) -> None:
    spec = written(tmp_path / "s.yaml", SPEC.format(model="acme/secret-13b", extra=""))
    out, err = cli(["plan", str(spec)], 2)
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{spec}:3: model.name: " in err
    assert "model.paramsBillion" in err


def test_missing_config_file_is_located(capsys, tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(model="acme/x", extra="\n  config: nope/config.json"))
    code, _, err = run(["plan", str(spec)], capsys)
    assert code == 2 and ":5: model.config: no such file" in err


def test_unknown_gpu_and_bad_output(capsys, tmp_path: Path) -> None:
    spec = written(tmp_path / "s.yaml", SPEC.format(model="Qwen/Qwen3-8B", extra=""))
    code, _, err = run(["plan", str(spec), "--gpu", "TPU-v5"], capsys)
    assert code == 2 and "unknown GPU type" in err and "H200" in err
    code, _, err = run(["plan", str(spec), "-o", "yaml"], capsys)
    assert code == 2 and "--output" in err


def test_does_not_fit_names_the_nearest_fit(capsys, tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(model="meta-llama/Llama-3.1-70B-Instruct", extra=""))
    out, err = cli(["plan", str(spec), "--gpu", "L40S"], 1)  # a role that does not fit is exit 1
    assert "does not fit" in out and "nearest that fits" in out


def test_spec_sections_for_gpu_and_workload_are_honoured() -> None:
    # pdctl/spec/workload.py sections; the lead wires them into Spec as `hardware`/`workload`.
    work = Workload.model_validate({"promptTokens": 4000, "requestsPerSecond": 3, "tpotMs": 40})
    spec = SimpleNamespace(
        hardware=Hardware.model_validate({"gpu": "L40S"}), workload=work, decode=None
    )
    gpu, origin = spec_gpu(spec, None, None)
    assert gpu.name == "L40S" and origin == "hardware.gpu"
    assert spec_gpu(spec, "H200", None)[0].name == "H200"  # the option wins
    traffic = spec_traffic(spec, None, 100, None, None, None)
    assert (
        traffic.prompt_tokens, traffic.output_tokens, traffic.requests_per_second, traffic.tpot_ms,
    ) == (4000, 100, 3, 40)
    bad = SimpleNamespace(hardware=Hardware(gpu="Z80"), workload=None, decode=None)
    with pytest.raises(SpecError) as err:
        spec_gpu(bad, None, None)
    assert err.value.path == "hardware.gpu"


def test_spec_from_stdin(capsys, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(SPEC.format(model="Qwen/Qwen3-8B", extra="")))
    out, err = cli(["plan", "-", "-o", "json"])
    assert json.loads(out)["model"]["name"] == "Qwen/Qwen3-8B"


def test_plan_table_names_the_flashinfer_only_sampler_of_0_10(capsys, tmp_path: Path) -> None:
    # vLLM 0.9-0.11.0 in the vllm-openai image profiled the sampler with FlashInfer alone:
    # the table says so (and the activation is the smaller term); 0.33 sorts
    spec = tmp_path / "s.yaml"
    old = SPEC.format(model="Qwen/Qwen2-7B-Instruct", extra="\nengine: {version: '0.10.1'}")
    spec.write_text(old)
    out, err = cli(["plan", str(spec), "--gpu", "A100-80GB", "-o", "wide"])
    assert re.search(r"FlashInfer[\s│|]*only", out), out
    data = json.loads(run(["plan", str(spec), "--gpu", "A100-80GB", "-o", "json"], capsys)[1])
    assert data["roles"][0]["samplerProfile"] == "flashinfer"
    spec.write_text(SPEC.format(model="Qwen/Qwen2-7B-Instruct", extra=""))
    out, err = cli(["plan", str(spec), "--gpu", "A100-80GB", "-o", "wide"])
    assert not re.search(r"FlashInfer[\s│|]*only", out)
    data = json.loads(run(["plan", str(spec), "--gpu", "A100-80GB", "-o", "json"], capsys)[1])
    assert data["roles"][0]["samplerProfile"] == "sorted"


def test_plan_wide_has_the_how_column_and_the_default_does_not(capsys) -> None:
    """Before `-o wide`: `-o wide` was refused (exit 2) and the default table had the "how"
    column (a 240-column table)."""
    example = str(ROOT / "examples" / "phase0-conda.yaml")
    code, wide, err = run(["plan", example, "-o", "wide"], capsys, env={"COLUMNS": "250"})
    assert code == 0, err
    assert "KV cache size (vLLM's count)" in wide and "params x bytes/param / TP" in wide
    code, compact, err = run(["plan", example], capsys, env={"COLUMNS": "250"})
    assert code == 0, err
    assert "params x bytes/param" not in compact and " how " not in compact
    code, _, err = run(["plan", example, "-o", "yaml"], capsys)
    assert code == 2 and "table, wide or json" in err


def test_plan_on_a_cpu_spec_claims_no_gpu(capsys) -> None:
    """Before: an `engine.device: cpu` spec got the GPU tables of an assumed H100 (memory per
    GPU, --gpu-memory-utilization, a GPU roofline) and 'no GPU given: planned for an
    H100-SXM'."""
    example = str(ROOT / "examples" / "cpu-quickstart.yaml")
    out, err = cli(["plan", example])
    flat = " ".join(out.split())
    assert "engine.device cpu: GPU capacity planning does not apply" in flat
    for gpu_claim in ("H100", "memory per GPU", "gpu-memory-utilization", "roofline", "TFLOP"):
        assert gpu_claim not in out, gpu_claim
    assert "weights (RAM)" in out and "0.92 GiB" in out
    assert "VLLM_CPU_KVCACHE_SPACE 4 GiB" in flat
    assert "KV tokens it holds 349,525" in flat  # 4 GiB / 12,288 B per token
    out, err = cli(["plan", example, "-o", "json"])
    assert json.loads(out)["gpuCapacityPlanning"] == "does not apply: engine.device is cpu"


def test_a_tiny_model_is_not_zero_billion_params() -> None:
    """Before: the CPU e2e's 551,552-parameter Llama was '0.00B params'."""
    assert _params(551_552) == "0.6M params"
    assert _params(8.03e9) == "8.03B params"
    assert _params(0) == "parameter count unknown"
