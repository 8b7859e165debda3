"""Model-aware parallelism checks (plan/parallel.py): what vLLM refuses at start is one line and
exit 2 at validate time, with the nearest valid sizes (docs/placement.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdctl.errors import SpecError
from pdctl.plan.parallel import Dims, check_parallel, valid_tp
from pdctl.spec import load_text
from tests.helpers import cli, run_cli, written

SERVE = """\
name: q32
model: {name: Qwen/Qwen3-32B}
hosts:
  - {name: gpu-a, address: 192.0.2.10, gpus: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]}
serve: {replicas: 1, tensorParallel: 3}
"""

PD = """\
name: q32
phase: 2
model: {name: Qwen/Qwen3-32B}
hosts:
  - {name: gpu-a, address: 192.0.2.10, gpus: [0, 1, 2, 3, 4, 5, 6, 7]}
  - {name: gpu-b, address: 192.0.2.11, gpus: [0, 1, 2, 3, 4, 5, 6, 7]}
prefill: {replicas: 1, tensorParallel: 4}
decode: {replicas: 1, tensorParallel: 2}
disaggregation: {connector: nixl}
"""

QWEN3_32B = Dims("Qwen/Qwen3-32B", heads=64, kv_heads=8, layers=64)


def _validate(tmp_path: Path, capsys, text: str, *extra: str) -> tuple[int, str, str]:
    spec = written(tmp_path / "s.yaml", text)
    return run_cli(["validate", str(spec), *extra], capsys)


@pytest.mark.parametrize("tp", [3, 5])
def test_tp_not_dividing_heads_is_refused(tmp_path: Path, capsys, tp: int) -> None:
    """Before: TP 3 and TP 5 for Qwen3-32B passed validate."""
    code, out, err = _validate(
        tmp_path, capsys, SERVE.replace("tensorParallel: 3", f"tensorParallel: {tp}")
    )
    assert code == 2, out
    assert err.count("\n") == 1
    assert (
        ":5: serve.tensorParallel: Qwen/Qwen3-32B (pdctl's model table) has 64 attention "
        f"heads, which tensorParallel {tp} does not divide; use tensorParallel "
        f"{'2 or 4' if tp == 3 else '4 or 8'} (valid: 1, 2, 4, 8, 16, 32, 64)" in err
    ), err


def test_kv_heads_replicate_only_by_multiples() -> None:
    # 40 heads, 8 KV heads (Qwen3-14B): TP 10 divides the heads, but 8 neither divides 10
    # nor is 10 a multiple of 8; TP 40 replicates by 5, but the spec's host has 15 GPUs.
    dims = Dims("qwen3-14b", heads=40, kv_heads=8, layers=40)
    assert valid_tp(dims) == [1, 2, 4, 8, 40]
    spec, _ = load_text(
        SERVE.replace("Qwen/Qwen3-32B", "x").replace("tensorParallel: 3", "tensorParallel: 10"), "s"
    )
    with pytest.raises(SpecError) as err:
        check_parallel(spec, 0, dims)
    assert "has 8 KV heads" in err.value.message and err.value.fix.startswith(
        "use tensorParallel 8 (the instance has at most 15 GPUs on a host)"
    ), err.value.fix


def test_qwen3_32b_tp_16_is_valid_kv_heads_replicated() -> None:
    assert 16 in valid_tp(QWEN3_32B) and 64 in valid_tp(QWEN3_32B)


def test_pp_over_layers(tmp_path: Path, capsys) -> None:
    text = SERVE.replace("tensorParallel: 3", "tensorParallel: 1, pipelineParallel: 40")
    text = text.replace("Qwen/Qwen3-32B", "Qwen/Qwen2.5-0.5B-Instruct")
    text = text.replace("[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]", str(list(range(40))))
    code, _, err = _validate(tmp_path, capsys, text)
    assert code == 2
    assert "serve.pipelineParallel: pipelineParallel 40 exceeds the 24 layers" in err, err


def test_expert_parallel_needs_experts() -> None:
    spec, _ = load_text(SERVE.replace("tensorParallel: 3", "tensorParallel: 2"), "s")
    spec = spec.model_copy(
        update={"serve": spec.serve.model_copy(update={"expert_parallel": True})}
    )
    with pytest.raises(SpecError) as err:
        check_parallel(spec, 0, QWEN3_32B)
    assert err.value.path == "serve.expertParallel"
    moe = Dims("qwen3-30b-a3b", heads=32, kv_heads=4, layers=48, experts=128)
    check_parallel(spec, 0, moe)  # 128 experts: fine (even uneven splits are, in vLLM)


def test_model_config_numbers_win_over_the_table(tmp_path: Path, capsys) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "num_hidden_layers": 4, "hidden_size": 96, "num_attention_heads": 6,
                "num_key_value_heads": 6,
            }
        )
    )
    text = SERVE.replace(
        "model: {name: Qwen/Qwen3-32B}", "model: {name: Qwen/Qwen3-32B, config: config.json}"
    )
    code, _, err = _validate(
        tmp_path, capsys, text.replace("tensorParallel: 3", "tensorParallel: 4")
    )
    assert code == 2
    assert "Qwen/Qwen3-32B (model.config) has 6 attention heads" in err, err
    code, out, err = _validate(tmp_path, capsys, text)  # TP 3 divides 6
    assert code == 0, err


def test_unknown_model_is_not_checked(tmp_path: Path, capsys) -> None:
    code, _, err = _validate(tmp_path, capsys, SERVE.replace("Qwen/Qwen3-32B", "acme/secret-7b"))
    assert code == 0, err


def test_nixl_prefill_and_decode_tp_must_divide(tmp_path: Path, capsys) -> None:
    text = PD.replace(
        "prefill: {replicas: 1, tensorParallel: 4}", "prefill: {replicas: 1, tensorParallel: 2}"
    )
    text = text.replace(
        "decode: {replicas: 1, tensorParallel: 2}", "decode: {replicas: 1, tensorParallel: 3}"
    )
    # TP 3 fails the heads first; the connector rule needs both sides valid for the model.
    code, _, err = _validate(tmp_path, capsys, text)
    assert code == 2 and "decode.tensorParallel: Qwen/Qwen3-32B" in err
    check = Dims("m", heads=48, kv_heads=48, layers=4)  # 48 heads: TP 2, 3, 4 and 6 valid
    spec, _ = load_text(text.replace("tensorParallel: 2", "tensorParallel: 4"), "s")
    with pytest.raises(SpecError) as exc:
        check_parallel(spec, 2, check)
    assert exc.value.path == "decode.tensorParallel"
    assert "one divides the other (prefill 4, decode 3)" in exc.value.message
    assert exc.value.fix.startswith("set decode.tensorParallel to 2 or 4")


def test_nixl_and_mooncake_allow_prefill_tp_above_decode(tmp_path: Path, capsys) -> None:
    """llm-d's guides say decode TP >= prefill TP (NIXL) and equal TP (Mooncake); the pinned
    vLLM source maps either ratio."""
    code, _, err = _validate(tmp_path, capsys, PD)
    assert code == 0, err
    code, _, err = _validate(tmp_path, capsys, PD.replace("connector: nixl", "connector: mooncake"))
    assert code == 0, err


def test_nixl_refuses_replicated_prefill_kv_into_smaller_decode(tmp_path: Path, capsys) -> None:
    text = PD.replace(
        "prefill: {replicas: 1, tensorParallel: 4}", "prefill: {replicas: 1, tensorParallel: 16}"
    )
    text = text.replace("gpus: [0, 1, 2, 3, 4, 5, 6, 7]}", f"gpus: {list(range(16))}}}", 1)
    code, _, err = _validate(tmp_path, capsys, text)
    assert code == 2
    assert (
        "prefill.tensorParallel: nixl cannot send from prefill TP 16 to a smaller decode "
        "TP 2" in err
    ), err
    code, _, err = _validate(
        tmp_path, capsys, text.replace("connector: nixl", "connector: mooncake")
    )
    assert code == 0, err


def test_pins_on_kubernetes_are_a_warning(tmp_path: Path, capsys) -> None:
    """Like the `hosts` section they name, pins are not used on Kubernetes: said, not dropped."""
    text = PD.replace("decode: {replicas: 1,", "decode: {hosts: [gpu-b], replicas: 1,")
    text += "kubernetes: {storage: {type: emptyDir}}\n"
    code, out, err = _validate(tmp_path, capsys, text, "--target", "kubernetes")
    assert code == 0, err
    assert (
        "warning: decode.hosts (gpu-b) pins bare-metal hosts and is not used on Kubernetes" in err
    ), err


def test_mla_models_are_checked_on_attention_heads_only() -> None:
    """DeepSeek's MLA caches one latent per token: the GQA KV-head split does not apply."""
    mla = Dims("deepseek-v2-lite", heads=16, kv_heads=6, layers=27, experts=64, mla=True)
    assert valid_tp(mla) == [1, 2, 4, 8, 16]


@pytest.mark.parametrize("command", ["plan", "render"])
def test_plan_and_render_refuse_what_validate_refuses(tmp_path: Path, capsys, command) -> None:
    """Before: `pdctl plan` of a TP 3 Qwen3-32B spec printed a capacity table (exit 0)."""
    spec = written(tmp_path / "s.yaml", SERVE)
    out, err = cli([command, str(spec)], 2)
    assert ":5: serve.tensorParallel: Qwen/Qwen3-32B" in err and "does not divide" in err, err


def test_validate_checks_the_mlp_width(tmp_path: Path, capsys) -> None:
    """Qwen2.5-7B: 28 heads and 4 KV heads allow TP 28, but intermediate_size 18944 does not
    divide by 28; validate reads the width from the same model table as plan."""
    text = SERVE.replace("Qwen/Qwen3-32B", "Qwen/Qwen2.5-7B-Instruct")
    text = text.replace("tensorParallel: 3", "tensorParallel: 28")
    text = text.replace("[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]", str(list(range(28))))
    code, _, err = _validate(tmp_path, capsys, text)
    assert code == 2
    assert "has intermediate_size 18944, which tensorParallel 28 does not divide" in err, err
