"""Model checks validate makes before vLLM would refuse: TP (and EP) against block-quantised
fp8 weights (vllm#17569), and a model pdctl does not know is said, not passed silently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdctl.capacity.params import model_config, parse_config
from pdctl.plan.parallel import Dims, valid_tp
from tests.capacity.conftest import serve_spec
from tests.helpers import cli, written
from tests.helpers import run_cli as run

# Qwen/Qwen3-30B-A3B-FP8's config.json, the fields that matter (huggingface.co/Qwen)
FIXTURES = Path(__file__).parents[1] / "fixtures" / "capacity"
QWEN3_30B_FP8 = json.loads((FIXTURES / "qwen3-30b-a3b-fp8.config.json").read_text())


def _spec(tmp_path: Path, name: str, tp: int, extra: str = "") -> str:
    serve = f"replicas: 1, tensorParallel: {tp}{extra}"
    return str(written(tmp_path / "s.yaml", serve_spec(name, gpus=tp, serve=serve)))


@pytest.mark.parametrize(
    ("name", "tp", "width"),
    [("Qwen/Qwen3-235B-A22B-FP8", 8, "1536"), ("Qwen/Qwen3-30B-A3B-FP8", 4, "768")],
)
def test_fp8_block_weights_refuse_a_tp_that_splits_a_block(
    tmp_path: Path, capsys, name: str, tp: int, width: str
) -> None:
    path = _spec(tmp_path, name, tp)
    for command in (["validate", path], ["plan", path]):
        _, err = cli(command, 2)
        line = err.strip().splitlines()[-1]
        assert "serve.tensorParallel" in line and f"moe_intermediate_size {width}" in line
        assert "weight quantization block" in line and "expertParallel: true" in line


def test_expert_parallel_keeps_experts_whole(tmp_path: Path, capsys) -> None:
    path = _spec(tmp_path, "Qwen/Qwen3-235B-A22B-FP8", 8, ", expertParallel: true")
    _, err = cli(["validate", path])


def test_the_bf16_model_keeps_its_tp(tmp_path: Path, capsys) -> None:
    path = _spec(tmp_path, "Qwen/Qwen3-30B-A3B", 4)
    _, err = cli(["validate", path])


def test_the_block_comes_from_the_models_config() -> None:
    model = parse_config("x", QWEN3_30B_FP8, None)
    assert model.weight_block == (128, 128)
    dims = Dims.of(model)
    # 768 / TP must be a multiple of 128: TP 1, 2 (384), 3 (256), 6 (128)
    assert [t for t in valid_tp(dims, 8) if 32 % t == 0] == [1, 2]
    assert 4 not in valid_tp(dims, 8) and 4 in valid_tp(dims, 8, expert_parallel=True)
    no_block = dict(QWEN3_30B_FP8, quantization_config={"quant_method": "fp8"})
    assert 4 in valid_tp(Dims.of(parse_config("x", no_block, None)), 8)


def test_plan_never_suggests_a_tp_the_block_refuses(tmp_path: Path, capsys) -> None:
    """Qwen3-235B-A22B-FP8 does not fit on TP 4 of L40S: the suggested TP (if any) must
    split 1536 on a 128 boundary, so never 8."""
    model = model_config("Qwen/Qwen3-235B-A22B-FP8")
    path = written(tmp_path / "s.yaml", serve_spec(
        "Qwen/Qwen3-235B-A22B-FP8", gpus=8, serve="replicas: 1, tensorParallel: 4",
        tail="hardware: {gpu: L40S}\n"))
    out, err = cli(["plan", str(path), "-o", "json"], 1)
    role = json.loads(out)["roles"][0]
    tps = [a["tensorParallel"] for a in role["alternatives"]]
    if role["smallestFit"]:
        tps.append(role["smallestFit"]["tensorParallel"])
    assert tps and all(model.moe_intermediate // t % 128 == 0 for t in tps), tps


def test_an_unknown_model_is_a_warning_and_strict_refuses_it(tmp_path: Path, capsys) -> None:
    path = _spec(tmp_path, "Qwen/Qwen3-32B-Instrukt", 3)
    code, out, err = run(["validate", path], capsys)
    assert code == 0, err
    assert "warning: model.name: pdctl does not know 'Qwen/Qwen3-32B-Instrukt'" in err
    assert "nothing model-specific was checked" in err and "did you mean qwen3-32b?" in err
    code, out, err = run(["validate", "--strict", path], capsys)
    assert code == 1 and "refused (--strict)" in err
    code, out, err = run(["render", "--strict", path], capsys)
    assert code == 1 and "nothing model-specific was checked" in err


def test_plan_names_the_nearest_known_model(tmp_path: Path, capsys) -> None:
    path = _spec(tmp_path, "Qwen/Qwen3-32B-Instrukt", 1)
    _, err = cli(["plan", path], 2)
    assert "did you mean qwen3-32b?" in err
    assert "deepseek-r1" not in err  # not the alphabetical head of the table


def test_a_known_model_has_no_such_warning(tmp_path: Path, capsys) -> None:
    path = _spec(tmp_path, "Qwen/Qwen3-32B", 2)
    code, _, err = run(["validate", "--strict", path], capsys)
    assert code == 0 and "does not know" not in err, err
