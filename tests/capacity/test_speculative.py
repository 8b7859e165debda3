"""Speculative decoding's draft in the memory model (issue 37 item 3.2, capacity/speculative.py).

vLLM sizes the draft's KV layers in the same pool as the target's (one page a layer, one
group of target + draft layers for full attention): a token costs both, so fewer tokens fit;
the draft's weights come out of the budget before the KV cache. Hand arithmetic per test.
"""

from __future__ import annotations

from pdctl.capacity import Shape, find_gpu, instance_memory, model_config
from pdctl.capacity.memory import tokens_in, weights_bytes_per_gpu
from pdctl.capacity.memory_features import speculative_notes
from pdctl.spec import load_text
from pdctl.spec.speculative import Speculative

H200 = find_gpu("H200")


def _mem(model: str, spec: Speculative | None, tp: int = 1, length: int = 8192, **kw):
    shape = Shape(tp=tp, dtype="auto", kv_cache_dtype=kw.pop("kv", "auto"),
                  max_model_len=length, gpu="H200", speculative=spec, **kw)
    return instance_memory(model_config(model), H200.usable_bytes, 0.9, shape)


def test_draft_model_from_the_table() -> None:
    """Qwen3-8B with Qwen3-0.6B as draft_model, TP 1, bf16.
    KV a token: target 2 x 36 x 8 x 128 x 2 B = 147,456; draft 2 x 28 x 8 x 128 x 2 B =
    114,688; together 262,144. Weights: the target's + the 0.6B's whole (embeddings counted)."""
    spec = Speculative(method="draft_model", model="Qwen/Qwen3-0.6B", num_speculative_tokens=4)
    alone = _mem("Qwen/Qwen3-8B", None)
    both = _mem("Qwen/Qwen3-8B", spec)
    assert alone.kv_per_token == 147_456
    assert both.kv_per_token == 147_456 + 114_688
    draft_w = weights_bytes_per_gpu(model_config("Qwen/Qwen3-0.6B"), 1, 1, "auto")
    assert both.weights == alone.weights + draft_w
    assert both.kv_tokens == tokens_in(both.kv_available, 262_144, 16)
    assert both.kv_tokens < alone.kv_tokens * 0.57  # 147,456 / 262,144 = 0.5625, less weights


def test_deepseek_mtp_layer() -> None:
    """DeepSeek-V3 (num_nextn_predict_layers 1), TP 8, bf16 KV: MLA latent 512 + 64 = 576 x 2 B
    = 1,152 B a layer; 61 + 1 MTP layer = 62 x 1,152 = 71,424 B a token."""
    spec = Speculative(method="mtp", num_speculative_tokens=1)
    mem = _mem("deepseek-ai/DeepSeek-V3", spec, tp=8)
    assert mem.kv_per_token == 62 * 1152
    assert _mem("deepseek-ai/DeepSeek-V3", None, tp=8).kv_per_token == 61 * 1152


def test_qwen3_next_mtp_hybrid() -> None:
    """Qwen3-Next-80B-A3B, mtp (mtp_num_hidden_layers 1), 2 speculative tokens, TP 4, 32,768.
    State: conv 8,192/4 x (3 + 2) x 2 B = 20,480 + recurrent 262,144 = 282,624;
    block 16 x cdiv(282,624, 16,384) = 16 x 18 = 288. Full layers 12 + 1 = 13, linear 36:
    group 13 (36 >= 1.5 x 13), 1 full group, cdiv(36, 13) = 3 linear groups.
    A request: cdiv(32,768, 288) = 114 + 3 x (1 + 2) = 123 blocks."""
    spec = Speculative(method="mtp", num_speculative_tokens=2)
    mem = _mem("Qwen/Qwen3-Next-80B-A3B-Instruct", spec, tp=4, length=32768)
    layout = mem.layout
    assert layout.state_bytes == 282_624
    assert layout.block_size == 288 == mem.block_size
    assert (layout.full_layers, layout.group) == (13, 13)
    assert layout.blocks_per_request(32768) == 123
    assert mem.kv_tokens == int(layout.blocks(mem.kv_available) / 123 * 32768)
    # 10 GiB: 10,737,418,240 // 294,912 // 13 = 2,800 blocks; int(2,800 / 123 x 32,768) =
    # 745,938 (vLLM 0.23.0's own get_kv_cache_configs on CPU, same layers: 2,800 blocks,
    # "GPU KV cache size: 745,938 tokens", "Maximum concurrency ... 22.76x")
    assert layout.tokens(10 * 2**30, 32768) == 745_938


def test_ngram_and_unknown_drafts_change_nothing() -> None:
    base = _mem("Qwen/Qwen3-8B", None)
    ngram = Speculative(method="ngram", num_speculative_tokens=3)
    assert _mem("Qwen/Qwen3-8B", ngram).kv_tokens == base.kv_tokens
    eagle = Speculative(method="eagle3", model="org/unknown-eagle3", num_speculative_tokens=3)
    assert _mem("Qwen/Qwen3-8B", eagle).kv_tokens == base.kv_tokens


def test_notes_say_counted_or_why_not() -> None:
    text = (
        "name: t\nphase: 0\nmodel: {name: Qwen/Qwen3-8B, maxModelLen: 8192}\n"
        "engine: {version: '0.23.0'}\nhosts:\n"
        "  - {name: g, address: 10.0.0.1, gpus: [0], runtime: venv, venv: /opt/v}\n"
        "serve: {replicas: 1, speculative: {method: %s, model: %s, numSpeculativeTokens: 3}}\n"
    )
    known, _ = load_text(text % ("draft_model", "Qwen/Qwen3-0.6B"), "s.yaml")
    (note,) = speculative_notes(known, model_config("Qwen/Qwen3-8B"))
    assert "counted: the draft Qwen/Qwen3-0.6B (28 layers)" in note and "28 KV layer(s)" in note
    unknown, _ = load_text(text % ("eagle3", "org/unknown-eagle3"), "s.yaml")
    (note,) = speculative_notes(unknown, model_config("Qwen/Qwen3-8B"))
    assert "not counted (the draft org/unknown-eagle3 is not in pdctl's model table" in note
