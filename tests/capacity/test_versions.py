"""Start-up terms that changed across vLLM versions, and the multimodal terms.

Each figure is checked against a real log (tests/capacity/vllm_logs.py names the URL).
"""

from __future__ import annotations

from pdctl.capacity import instance_memory, model_config
from pdctl.capacity.fit import Shape
from pdctl.capacity.gpus import GIB
from pdctl.capacity.memory import weights_bytes_per_gpu
from pdctl.capacity.params import parse_config
from pdctl.capacity.profile import (
    activation_bytes,
    encoder_bytes,
    encoder_tokens,
    graphs_counted,
    moe_workspace_bytes,
    sampler_bytes,
    v2_runner,
)
from tests.capacity.vllm_logs import CONFIGS, LOGS, predict

QWEN2_7B = model_config("Qwen/Qwen2-7B-Instruct")


def _per_logit(engine: str, flashinfer: bool | None = None) -> float:
    return sampler_bytes(QWEN2_7B, 256, engine, flashinfer) / (256 * QWEN2_7B.vocab)


def test_sampler_profile_bytes_per_logit_by_version() -> None:
    # 0.10.1.1 on an A100 logged "Using FlashInfer for top-p & top-k sampling." and its
    # profile peak was ~16 bytes a logit, as was 0.11.0's for Mistral-Small-3.2 (llm-d);
    # vllm#26859 (0.11.1) turned that sampler off by default: llm-d's later runs and 0.33 sort
    assert round(_per_logit("0.10.1")) == 16
    assert round(_per_logit("0.9.2")) == 16
    assert round(_per_logit("0.11.0")) == 16
    assert round(_per_logit("0.10.1", flashinfer=False), 1) == 38.6  # pip: no FlashInfer
    for engine in ("0.8.3", "0.11.1", "0.12", "0.19.0"):
        assert round(_per_logit(engine), 1) == 38.6, engine
    # 0.23.0's V1 runner filters with the Triton kernel in place (no sort): bf16 logits, fp32
    # copy, softmax, exponential noise = 14 bytes a logit, plus the kernel's 132-row buffer;
    # 0.33.0's V2 runner: bf16 + fp32 processed logits + the penalties' int32 bin counts = 10
    assert round(_per_logit("0.23.0") - 132 * 4 / 256, 2) == 14
    assert round(_per_logit("0.33.0") - 132 * 4 / 256, 2) == 10


def test_a100_pcie_pair_at_0_10_within_one_percent() -> None:
    # dennislee22/vLLM-benchmarking: TP 2 on A100-80GB PCIe (no P2P, FlashInfer sampler),
    # 0.25 and 0.5 util: 12.02 and 31.83 GiB available
    cases = [log for log in LOGS if log.name.startswith("Qwen2-7B, 2x A100-80GB TP2")]
    assert len(cases) == 2
    for log in cases:
        assert log.kv_gib is not None
        assert abs(predict(log).kv_gib - log.kv_gib) / log.kv_gib < 0.01, log.name


def test_vision_tower_weights_are_counted() -> None:
    # Mistral-Small-3.2 (Pixtral tower + projector): vLLM 0.11 "Model loading took 44.76 GiB";
    # the language model alone is 43.91 GiB
    model = model_config("mistralai/Mistral-Small-3.2-24B-Instruct-2506")
    assert 0.40e9 < model.vision_params < 0.48e9
    assert abs(weights_bytes_per_gpu(model) / GIB - 44.76) < 0.1


def test_vision_config_nested_like_hf_multimodal_configs() -> None:
    # Mistral3ForConditionalGeneration / Qwen2-VL style: text_config + vision_config
    raw = {
        "text_config": {
            "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
            "vocab_size": 1000,
        },
        "vision_config": {
            "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 2,
            "hidden_act": "gelu", "patch_size": 14,
        },
    }
    model = parse_config("tiny-vl", raw, None)
    per_layer = 4 * 256 * 256 + 2 * 256 * 1024 + 4 * 256
    assert model.vision_params == 2 * per_layer + 3 * 14 * 14 * 256 + 256 * 512 + 512 * 512
    text_only = parse_config("tiny", raw["text_config"], None)
    assert text_only.vision_params == 0
    assert weights_bytes_per_gpu(model) - weights_bytes_per_gpu(text_only) == int(
        model.vision_params * 2
    )


def test_encoder_profile_only_for_vision_models_and_taken_as_the_larger_term() -> None:
    text = model_config("Qwen/Qwen3-0.6B")
    assert encoder_bytes(text, 1, 8192, 2) == 0
    mistral = model_config("mistralai/Mistral-Small-3.2-24B-Instruct-2506")
    # 8192 tokens x 4 patches x (2 x 1024 + 3 x 4096) values + the embeddings kept
    assert encoder_bytes(mistral, 1, 8192, 2) == int(
        8192 * 4 * (2 * 1024 + 3 * 4096) * 2 + 8192 * 5120 * 2
    )
    # a tower wider than its language model: the encoder sets the profile's peak
    raw = {
        "text_config": {
            "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
            "vocab_size": 1000,
        },
        "vision_config": {
            "hidden_size": 1024, "intermediate_size": 8192, "num_hidden_layers": 2,
            "hidden_act": "silu",
        },
        "spatial_merge_size": 2,
    }
    wide = parse_config("wide-vl", raw, None)
    enc = encoder_bytes(wide, 1, 8192, 2)
    assert enc > activation_bytes(
        parse_config("t", raw["text_config"], None), 1, 8192, 1, 2, "0.33.0"
    )
    mem = instance_memory(
        wide, 80 * GIB, 0.9, Shape(max_num_batched_tokens=8192, max_num_seqs=1, gpu="H100-SXM")
    )
    assert mem.overhead.activation == enc


def test_encoder_profile_takes_the_largest_item_not_the_batch_budget() -> None:
    # vLLM encodes cdiv(max(max_num_batched_tokens, item), item) copies of the largest item
    # (compute_mm_encoder_budget, profile_run): for Qwen2.5-VL one 16,384-token image
    # (max_pixels 12845056 / 28^2) even at max_num_batched_tokens 2048 (an A100's default)
    vl = model_config("Qwen/Qwen2.5-VL-3B-Instruct", CONFIGS["qwen2.5-vl-3b"])
    one_image = encoder_bytes(vl, 1, 16384, 2)
    assert one_image == int(16384 * 4 * (2 * 1280 + 3 * 3420) * 2 + 16384 * vl.hidden * 2)
    mem = instance_memory(
        vl, 80 * GIB, 0.9, Shape(max_num_batched_tokens=2048, max_num_seqs=256, gpu="A100-80GB")
    )
    assert mem.overhead.activation == one_image
    # Mistral-Small-3.2 (Pixtral, 1540 px, 14 px patches merged 2 x 2: 55 x 56 = 3080 tokens an
    # image): an 8192-token budget encodes three whole images, at most one a sequence
    mistral = model_config("mistralai/Mistral-Small-3.2-24B-Instruct-2506")
    assert encoder_tokens(mistral, 8192, 1024) == 3 * 3080
    assert encoder_tokens(mistral, 8192, 2) == 2 * 3080
    assert encoder_tokens(model_config("Qwen/Qwen3-0.6B"), 8192, 1024) == 0


def test_sliding_window_layers_hold_one_batch_in_0_23_and_two_in_0_33() -> None:
    """`SlidingWindowSpec.max_admission_blocks_per_request`: 0.23.0 holds window - 1 +
    max_num_batched_tokens tokens a request; 0.33.0 window - 1 + max_in_flight_tokens (two
    batches with async scheduling at PP 1). gpt-oss-20b on an H200 (8,192 batched tokens)
    at 32,768: 521 sliding blocks a request in 0.23, 1,033 in 0.33."""
    model = model_config("openai/gpt-oss-20b")
    old, new = (
        instance_memory(
            model, 140 * GIB, 0.9, Shape(max_model_len=32768, gpu="H200", engine=engine)
        )
        for engine in ("0.23.0", "0.33.0")
    )
    assert old.layout is not None and new.layout is not None
    assert old.layout.in_flight == 8192 and new.layout.in_flight == 16384
    full = 2048  # 32,768 / 16 for the full-attention group
    assert old.layout.blocks_per_request(32768) == full + 520 + 1
    assert new.layout.blocks_per_request(32768) == full + 1032 + 1
    assert old.kv_tokens > new.kv_tokens * 1.15  # 0.23 holds more requests in the same pool


def test_moe_workspace_stays_under_the_sampler_from_0_23() -> None:
    """TritonExperts.workspace_shapes (0.23.0): (M, top-k, max(I, K)) and (M, top-k,
    max(2I, K)), kept by the WorkspaceManager after the forward pass."""
    moe = model_config("Qwen/Qwen3-30B-A3B")  # hidden 2048, 8 of 128 experts of 768
    assert moe_workspace_bytes(moe, 1, 8192, 2, "0.23.0") == 8192 * 8 * (2048 + 2048) * 2
    assert moe_workspace_bytes(moe, 1, 8192, 2, "0.19.0") == 0  # before the manager
    assert moe_workspace_bytes(model_config("Qwen/Qwen3-8B"), 1, 8192, 2, "0.23.0") == 0
    assert moe_workspace_bytes(model_config("openai/gpt-oss-20b"), 1, 8192, 2, "0.23.0") == 0
    seqs = 1024
    peak = activation_bytes(moe, 1, 8192, seqs, 2, "0.23.0", gpu_name="H200")
    sampler = sampler_bytes(moe, seqs, "0.23.0", None, "H200")
    held = 8192 * 8 * 4096 * 2 + 8192 * 2048 * 2  # the workspace and the hidden states
    assert peak == sampler + held


def test_0_23_v2_runner_models_sample_lightly_and_leave_graphs_out() -> None:
    """vLLM 0.23.0 serves Llama/Mistral/Qwen3 dense bf16 on its V2 model runner: the profile
    samples without top-k/top-p (bf16 logits + fp32 copy: 6 bytes a logit) and reserves no
    CUDA-graph memory (`profile_cudagraph_memory` returns 0). MoE and quantised models keep
    the V1 runner's 14 bytes and graph estimate; 0.33 counts graphs for every model."""
    dense, moe = model_config("Qwen/Qwen3-8B"), model_config("Qwen/Qwen3-30B-A3B")
    fp8, qwen2 = model_config("Qwen/Qwen3-8B-FP8"), model_config("Qwen/Qwen2.5-7B-Instruct")
    assert v2_runner(dense, "0.23.0") and v2_runner(model_config("llama-3.1-8b"), "0.23.0")
    assert not any(v2_runner(m, "0.23.0") for m in (moe, fp8, qwen2))
    assert not v2_runner(dense, "0.33.0") and not v2_runner(dense, "0.19.0")
    assert sampler_bytes(dense, 1024, "0.23.0", None, "H200") == 1024 * dense.vocab * 6
    assert not graphs_counted("0.23.0", dense) and graphs_counted("0.23.0", moe)
    assert graphs_counted("0.33.0", dense)
    mem = instance_memory(dense, 140 * GIB, 0.9, Shape(max_model_len=8192, engine="0.23.0"))
    assert mem.overhead.cuda_graphs > 0 and not mem.overhead.graphs_counted
