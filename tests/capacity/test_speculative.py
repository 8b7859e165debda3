"""Speculative decoding's draft in the memory model (issue 37 item 3.2, capacity/speculative.py).

vLLM sizes the draft's KV layers in the same pool as the target's (one page a layer, one
group of target + draft layers for full attention): a token costs both, so fewer tokens fit;
the draft's weights come out of the budget before the KV cache. Hand arithmetic per test.
"""

from __future__ import annotations

from pdctl.capacity import Shape, find_gpu, instance_memory, model_config
from pdctl.capacity.memory import tokens_in, weights_bytes_per_gpu
from pdctl.capacity.memory_features import speculative_notes
from pdctl.errors import SpecError
from pdctl.inputs import read_spec
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


EAGLE3 = {  # SpecForge's Qwen3-8B EAGLE-3 head (configs/qwen3-8b-eagle3.json), tests/gpu/models
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 12288, "num_hidden_layers": 1, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "draft_vocab_size": 32000,
    "max_position_embeddings": 40960, "torch_dtype": "bfloat16",
}


def test_eagle3_head_from_its_config() -> None:
    """An EAGLE-3 head given as speculative.config (llama_eagle3.py, 0.23.0): first layer's
    qkv reads 2h: 8,192 x (4,096 + 2 x 1,024) = 50,331,648; o 4,096 x 4,096 = 16,777,216;
    MLP 3 x 4,096 x 12,288 = 150,994,944; fc 3h x h = 50,331,648; lm_head over the draft
    vocabulary 32,000 x 4,096 = 131,072,000; embedding shared: 399,507,456 x 2 B. One KV
    layer as the target's: 147,456 + 4,096 B a token."""
    spec = Speculative(method="eagle3", model="/m/qwen3-8b-eagle3", num_speculative_tokens=3)
    spec._draft = EAGLE3
    alone = _mem("Qwen/Qwen3-8B", None)
    both = _mem("Qwen/Qwen3-8B", spec)
    assert both.weights - alone.weights == 399_507_456 * 2
    assert both.kv_per_token == 147_456 + 4_096
    # without the config the same head is unknown: nothing is counted
    bare = Speculative(method="eagle3", model="/m/qwen3-8b-eagle3", num_speculative_tokens=3)
    assert _mem("Qwen/Qwen3-8B", bare).kv_per_token == 147_456


def test_draft_config_is_read_and_located(tmp_path) -> None:
    """speculative.config is read when the spec is (relative to it); a missing file is one
    located line; mtp/ngram take none."""
    (tmp_path / "head.json").write_text(__import__("json").dumps(EAGLE3))
    text = ("name: e\nphase: 0\nmodel: {name: Qwen/Qwen3-8B}\nhosts:\n"
            "  - {name: a, address: 192.0.2.10, gpus: [0]}\n"
            "serve:\n  speculative: {method: eagle3, model: /m/h, numSpeculativeTokens: 3,"
            " config: head.json}\n")
    spec, _ = read_spec([(text, str(tmp_path / "s.yaml"))])
    assert spec.serve.speculative.draft_config == EAGLE3
    try:
        read_spec([(text.replace("head.json", "none.json"), str(tmp_path / "s.yaml"))])
        raise AssertionError("a missing draft config was accepted")
    except SpecError as exc:
        assert exc.path == "serve.speculative.config" and ":7: " in str(exc)
        assert "no such file" in exc.message
    mtp = text.replace("method: eagle3, model: /m/h", "method: mtp")
    try:
        load_text(mtp)
        raise AssertionError("mtp with a draft config was accepted")
    except SpecError as exc:
        assert "remove `config`" in str(exc.fix)
