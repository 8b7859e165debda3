"""The start-up terms of pdctl.capacity.profile, each against what vLLM does."""

from __future__ import annotations

from pdctl.capacity import instance_memory, model_config
from pdctl.capacity.fit import Shape
from pdctl.capacity.gpus import GIB, MIB, find_gpu
from pdctl.capacity.profile import (
    PINNED,
    default_batching,
    graphs_counted,
    mla_block,
    moe_workspace_bytes,
    non_torch_bytes,
    nvlink,
    nvls_bytes,
    sampler_bytes,
    triton_buffer_bytes,
)


def test_batching_defaults_follow_vllm_per_gpu() -> None:
    # vllm/engine/arg_utils.py get_batch_defaults (0.33.0): the A100 keeps 2048 / 256
    assert default_batching(find_gpu("A100-80GB").usable_bytes, "A100-80GB") == (2048, 256)
    assert default_batching(find_gpu("H100").usable_bytes, "H100-SXM") == (8192, 1024)
    assert default_batching(find_gpu("H200").usable_bytes, "H200") == (8192, 1024)
    assert default_batching(180 * GIB, "B200") == (16384, 1024)
    assert default_batching(find_gpu("L4").usable_bytes, "L4") == (2048, 256)
    # V0 without chunked prefill profiled a whole max-length prompt
    assert default_batching(24 * GIB, "RTX-3090", "0.6.4", 29000) == (29000, 256)


def test_gpt_oss_20b_on_an_a100_uses_the_a100_defaults() -> None:
    # the issue: an A100 planned with 1024 sequences lost ~10% of its KV memory
    model, gpu = model_config("openai/gpt-oss-20b"), find_gpu("A100-80GB")
    a100 = instance_memory(model, gpu.usable_bytes, 0.65, Shape(max_model_len=131072, gpu=gpu.name))
    as_if_h100 = instance_memory(
        model, gpu.usable_bytes, 0.65, Shape(max_model_len=131072, gpu="H100-SXM")
    )
    # less the Marlin fused-MoE scratch the A100 adds (mxfp4 off Hopper: test_mxfp4_marlin)
    marlin = moe_workspace_bytes(model, 1, 2048, 2, PINNED, gpu_name=gpu.name)
    assert marlin > 0
    assert a100.overhead.activation - marlin < as_if_h100.overhead.activation / 3
    # 256 sequences instead of 1024: 768 x 201,088 logits x 10 bytes less (0.33's sampler)
    assert a100.kv_available > as_if_h100.kv_available + 1 * GIB


def test_sampler_scales_with_sequences_and_vocabulary() -> None:
    llama = model_config("llama-3.1-8b")
    # 0.33: 10 bytes a logit plus the Triton kernel's buffer (SMs x vocab x 4, not per row)
    buf = triton_buffer_bytes(llama, 1024, "H100-SXM")
    assert buf == triton_buffer_bytes(llama, 256, "H100-SXM") == 132 * llama.vocab * 4
    many, few = (sampler_bytes(llama, n, "0.33.0", None, "H100-SXM") - buf for n in (1024, 256))
    assert abs(many - 4 * few) < 4 and abs(many - 1024 * llama.vocab * 10) < 4
    # vllm/vllm-openai (after 0.11.1) on an H100 printed 4.76 GiB for Llama-3.1-8B at 1024
    # sequences (llm-d-benchmark)
    assert abs(sampler_bytes(llama, 1024, "0.12.0") / GIB - 4.76) < 0.1


def test_all_reduce_buffers_depend_on_the_interconnect() -> None:
    assert nvlink("H100-SXM") and nvlink("A100-80GB") and nvlink("H200")
    assert not nvlink("L4") and not nvlink("RTX-4090") and not nvlink("H100-PCIe")
    assert not nvlink("A100-80GB PCIe")
    pcie, sxm = non_torch_bytes(2, 1, "L4"), non_torch_bytes(2, 1, "H100-SXM")
    assert non_torch_bytes(1, 1, "L4") < pcie < sxm < 1 * GIB  # not a flat 1.8 GiB


def test_cuda_graphs_come_out_of_the_kv_budget_from_0_21() -> None:
    assert graphs_counted("0.33.0") and graphs_counted("0.23.0")
    assert not graphs_counted("0.11.0") and not graphs_counted("0.6.5")
    model = model_config("qwen3-8b")
    new = instance_memory(model, 80 * GIB, 0.9, Shape(max_model_len=8192, engine="0.33.0"))
    old = instance_memory(model, 80 * GIB, 0.9, Shape(max_model_len=8192, engine="0.12.0"))
    for mem, graphs in ((new, new.overhead.cuda_graphs), (old, 0)):
        o = mem.overhead
        assert mem.kv_available == mem.budget - mem.weights - o.activation - o.non_torch - graphs
    eager = instance_memory(model, 80 * GIB, 0.9, Shape(max_model_len=8192, enforce_eager=True))
    assert eager.overhead.cuda_graphs == 0


def test_gpt_oss_sliding_layers_keep_only_their_window() -> None:
    model = model_config("openai/gpt-oss-120b")
    assert model.sliding_layers == 18 and model.sliding_window == 128
    mem = instance_memory(model, 80 * GIB, 0.9, Shape(max_model_len=131072, gpu="H100-SXM"))
    assert mem.layout is not None and mem.layout.full_layers == 18
    full = 2 * 36 * 8 * 64 * 2  # every layer full: 73,728 B a token
    assert mem.kv_per_token == full // 2
    # the window keeps window - 1 + in-flight tokens (2 x 8192 batched with async scheduling)
    assert full * 131072 * 0.5 < mem.kv_per_sequence < full * 131072 * 0.6


def test_mla_block_size_by_gpu() -> None:
    assert mla_block("H100-SXM") == 64 and mla_block("H200") == 64
    assert mla_block("A100-80GB") == 16 and mla_block("L4") == 16


def test_nvls_buffers_only_past_two_gpus_on_nvswitch_boards() -> None:
    # NCCL turns NVLink SHARP on only with more than 2 GPUs (src/transport/nvls.cc) on boards
    # whose NVSwitch multicasts; vllm#9699 printed 288 MiB a rank per communicator.
    base = non_torch_bytes(2, 1, "H100-SXM", "0.9.2")
    assert non_torch_bytes(4, 1, "H100-SXM", "0.9.2") - base == 2 * 4 * 288 * MIB
    assert non_torch_bytes(8, 1, "H200", "0.9.2") - base == 2 * 8 * 288 * MIB
    # NCCL's chunk-sized NVLS buffers (32 MiB a rank) from vLLM 0.10.2 (torch 2.8)
    assert non_torch_bytes(4, 1, "H100-SXM", "0.11.0") - base == 2 * 4 * 32 * MIB
    for gpu in ("A100-80GB", "H100-PCIe", "H100-NVL", "L40S"):  # no NVSwitch multicast
        assert nvls_bytes(8, gpu, "0.9.2") == 0, gpu
