"""`pdctl plan`: the extra prefix tokens engine.kvOffload's native tier keeps (issue 37 item 3.3).

vLLM 0.23.0 `CPUOffloadingSpec` (vllm/v1/kv_offload/cpu/spec.py l.27-60): one offloaded block
= one GPU block of every layer on every rank of the engine (a worker's KV bytes per block x
world_size; no `block_size` in the extra config, so 1 GPU block); the tier holds
cpu_bytes_to_use // that blocks, of block_size tokens each.
"""

from __future__ import annotations

from pdctl.capacity import find_gpu, spec_model_config, spec_shape, spec_traffic
from pdctl.capacity.report import plan_capacity
from pdctl.spec import load_text


def _notes(serve: str, model: str = "meta-llama/Llama-3.1-8B-Instruct") -> list[str]:
    text = (
        f"name: t\nphase: 0\nmodel: {{name: {model}, maxModelLen: 8192}}\n"
        "engine: {version: '0.23.0', kvOffload: {sizeGib: 16, backend: native}}\nhosts:\n"
        "  - {name: g, address: 10.0.0.1, gpus: [0, 1], runtime: venv, venv: /opt/v}\n"
        f"serve: {serve}\n"
    )
    spec, _ = load_text(text, "spec.yaml")
    model_cfg = spec_model_config(spec.model)
    shapes = {"serve": spec_shape(spec, "serve")}
    plan = plan_capacity(spec, model_cfg, find_gpu("H200"), spec_traffic(spec), shapes)
    return [n for n in plan.warnings if "more prefix tokens" in n or "not computed" in n]


def test_llama_8b_tp1() -> None:
    """Llama-3.1-8B: 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B a token; a block
    16 x 131,072 = 2,097,152 B; 16 GiB = 17,179,869,184 // 2,097,152 = 8,192 blocks x 16 =
    131,072 tokens."""
    (note,) = _notes("{replicas: 1, tensorParallel: 1}")
    assert "keeps about 131,072 more prefix tokens per engine" in note
    assert "131,072 bytes a token over its 1 GPU(s)" in note


def test_llama_8b_tp2_same_tier_same_tokens() -> None:
    """TP 2: a GPU holds 4 of the 8 KV heads (65,536 B a token) but an offloaded block holds
    both ranks' halves (x world_size 2): again 131,072 B a token, 131,072 tokens; the tier is
    the engine's, not each rank's."""
    (note,) = _notes("{replicas: 1, tensorParallel: 2}")
    assert "keeps about 131,072 more prefix tokens per engine" in note
    assert "over its 2 GPU(s)" in note


def test_qwen3_8b_fp8_kv() -> None:
    """Qwen3-8B: 36 layers x 8 KV heads x 128: 2 x 36 x 8 x 128 x 2 B = 147,456 B a token;
    block 2,359,296 B; 17,179,869,184 // 2,359,296 = 7,281 blocks x 16 = 116,496 tokens."""
    (note,) = _notes("{replicas: 1, tensorParallel: 1}", model="Qwen/Qwen3-8B")
    assert "keeps about 116,496 more prefix tokens" in note


def test_hybrid_says_not_computed() -> None:
    (note,) = _notes("{replicas: 1, tensorParallel: 2}", model="Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert "not computed for sliding-window or hybrid models" in note
