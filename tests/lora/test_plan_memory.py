"""The LoRA memory figures of `pdctl plan`, checked by hand for Llama-3.1-8B (hidden 4096,
32 heads of 128, 8 KV heads, intermediate 14336, 32 layers, vocab 128256, bf16)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pdctl.capacity import lora_shape, spec_model_config, spec_shape
from pdctl.capacity.fit import instance_memory
from pdctl.capacity.gpus import GIB
from pdctl.capacity.lora import adapter_bytes, gpu_bytes, host_bytes
from pdctl.cli.app import app
from tests.helpers import written
from tests.lora.specs import load, spec_text

LORA = {
    "maxLoras": 4, "maxLoraRank": 16,
    "adapters": [{"name": "sql", "hf": "o/sql", "rank": 8, "targetModules": ["q_proj", "v_proj"]}],
}
# Per layer, per slot, per unit of rank at TP 1: qkv 3 x 4096 + (4096 + 2 x 1024); o 4096 +
# 4096; gate_up 2 x 4096 + 2 x 14336; down 14336 + 4096 = 81,920. x 32 layers = 2,621,440;
# + embedding and lm_head 2 x (128,256 + 4,096) = 264,704 -> 2,886,144. x 16 x 4 x 2 bytes:
GPU_TP1 = 369_426_432  # 352.3 MiB
# TP 2: 7 x 4096 + (4096 + 1024) + 1.5 x 14336 = 55,296 a layer -> 2,034,176 -> x 128:
GPU_TP2 = 260_374_528
# The adapter: (8 x 4096 + 4096 x 8) + (8 x 4096 + 1024 x 8) = 106,496 x 32 layers x 2 bytes.
ADAPTER = 6_815_744  # 6.5 MiB


def test_gpu_buffers_and_adapter_size_by_hand() -> None:
    spec = load("phase0", LORA)
    model = spec_model_config(spec.model)
    lo = lora_shape(spec.model, model)
    assert gpu_bytes(model, lo, 1, model.layers, 2) == GPU_TP1
    assert gpu_bytes(model, lo, 2, model.layers, 2) == GPU_TP2
    assert adapter_bytes(model, 8, ("q_proj", "v_proj"), 2) == ADAPTER
    assert lo.cpu_slots == 4 and host_bytes(lo) == 4 * ADAPTER


def test_the_buffers_come_out_of_the_kv_cache() -> None:
    spec = load("phase0", LORA)
    model = spec_model_config(spec.model)
    shape = spec_shape(spec)
    with_lora = instance_memory(
        model, 80 * GIB, 0.9, replace(shape, lora=lora_shape(spec.model, model))
    )
    without = instance_memory(model, 80 * GIB, 0.9, replace(shape, lora=None))
    assert with_lora.lora == GPU_TP1
    assert with_lora.weights - without.weights == GPU_TP1
    assert without.kv_available - with_lora.kv_available == GPU_TP1
    # 369,426,432 B / 131,072 B a token = 2,818.5 tokens: 2,816 in whole 16-token blocks.
    assert without.kv_tokens - with_lora.kv_tokens in (2816, 2832)


def test_pdctl_plan_shows_the_lora_rows(tmp_path) -> None:
    path = written(tmp_path / "spec.yaml", spec_text("phase0", LORA, hardware={"gpu": "H100-80GB"}))
    result = CliRunner().invoke(app, ["plan", str(path), "-o", "wide"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "of which LoRA buffers" in result.output
    assert "352.3 MiB (-2,816 KV tokens)" in result.output
    assert "LoRA adapters in host memory" in result.output and "26.0 MiB" in result.output


def test_pdctl_plan_json_has_the_lora_bytes(tmp_path) -> None:
    import json

    path = written(tmp_path / "spec.yaml", spec_text("phase0", LORA, hardware={"gpu": "H100-80GB"}))
    result = CliRunner().invoke(app, ["plan", str(path), "-o", "json"])
    assert result.exit_code == 0, result.output
    (role,) = json.loads(result.output)["roles"]
    assert role["loraBuffersBytesPerGpu"] == GPU_TP1
    assert role["loraAdapterBytes"] == ADAPTER and role["loraHostBytes"] == 4 * ADAPTER


H200 = Path(__file__).resolve().parents[1] / "fixtures/gpu/vllm023-h200"


def h200_plan(lora: dict | None) -> dict:
    """`pdctl plan -o json` of the H200 bench's Qwen3-8B spec at util 0.9, with `lora`."""
    doc = yaml.safe_load((H200 / "bench/spec.yaml").read_text())
    doc["model"]["config"] = str(
        Path(__file__).resolve().parents[1] / "gpu/models/qwen3-8b/config.json"
    )
    doc["serve"] = {**doc.get("serve", {}), "gpuMemoryUtilization": 0.9}
    if lora is not None:
        doc["model"]["lora"] = lora
    out = CliRunner().invoke(app, ["plan", "-", "-o", "json"], input=yaml.safe_dump(doc))
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)["roles"][0]


@pytest.mark.parametrize(("case", "slots", "rank"), [("lora4r16", 4, 16), ("lora8r64", 8, 64)])
def test_the_buffers_match_what_vllm_took_on_an_h200(case: str, slots: int, rank: int) -> None:
    """vLLM 0.23.0 on an H200 (tests/fixtures/gpu/vllm023-h200/lora: Qwen3-8B, dummy weights,
    util 0.9, started without and with --enable-lora; not used to derive the formula): the
    weights it reports grow by the LoRA buffers, which the plan gives within 5%, and the KV
    tokens it sizes are the plan's within 1.5%."""
    runs = json.loads((H200 / "lora/results.json").read_text())
    base, lora = runs["qwen3-8b-u0.9"], runs[f"qwen3-8b-u0.9-{case}"]
    took = (lora["weights_gib"] - base["weights_gib"]) * GIB
    role = h200_plan(
        {"maxLoras": slots, "maxLoraRank": rank, "adapters": [{"name": "a", "path": "/srv/a"}]}
    )
    assert abs(role["loraBuffersBytesPerGpu"] / took - 1) < 0.05, (role, took)
    assert abs(role["kvTokens"] / lora["kv_tokens"] - 1) < 0.015, (role["kvTokens"], lora)
