"""gpt-oss's mxfp4 experts and fp8 weights off Hopper, as vLLM 0.23.0's source lays them out
(docs/capacity.md, "Quantised checkpoints off Hopper"). From the source only: no A100 or L40S
log of 0.23.0 is in the table. Every expected number below is worked out by hand from the
tensor shapes the source allocates, not taken from pdctl's output.

gpt-oss: hidden K = 2880, expert width I = 2880, top-4; 20b: 24 layers x 32 experts, 120b:
36 layers x 128 experts. mxfp4: a uint8 holds two 4-bit values, one uint8 (e8m0) scale per
32 values (quantization/mxfp4.py `create_weights`).

Marlin (A100 sm80, L40S sm89) rounds each rank's width up to 128 and the hidden size up to 256
(fused_moe/oracle/mxfp4.py `mxfp4_round_up_hidden_size_and_intermediate_size`):
TP 1: N = roundup(2880, 128) = 2944, K = roundup(2880, 256) = 3072;
TP 4: N = roundup(720, 128) = 768, K = 3072.

One expert of one layer on one rank, Marlin, TP 1 (repacking keeps 4 bits a value and the
e8m0 scales; the biases are bf16, marlin_utils_fp4.py `prepare_moe_mxfp4_layer_for_marlin`):
  w13 weight  2N x K/2   = 5888 x 1536 = 9,043,968
  w13 scale   2N x K/32  = 5888 x 96   =   565,248
  w2 weight   K x N/2    = 3072 x 1472 = 4,521,984
  w2 scale    K x N/32   = 3072 x 92   =   282,624
  w13 bias    2N x 2 B                 =    11,776
  w2 bias     K x 2 B                  =     6,144
  total                                = 14,431,744 bytes
pdctl's Hopper figure for the same expert (width to 256, hidden as is, no biases):
  3 x 3072 x 2880 x 17/32 bytes = 14,100,480; Marlin is 331,264 bytes more an expert-layer.
  gpt-oss-20b:  24 x 32  =   768 expert-layers: +254,410,752 B   (+0.237 GiB)
  gpt-oss-120b: 36 x 128 = 4,608 expert-layers: +1,526,464,512 B (+1.422 GiB)

TP 4, one rank: w13 1536 x 1536 = 2,359,296; w13 scale 1536 x 96 = 147,456; w2 3072 x 384 =
1,179,648; w2 scale 3072 x 24 = 73,728; biases 1536 x 2 + 3072 x 2 = 9,216: 3,769,344. Hopper
(width 768, hidden 2880): 3 x 768 x 2880 x 17/32 = 3,525,120; +244,224 an expert-layer,
x 4,608 = +1,125,384,192 B (+1.048 GiB): the 0.10.1 log of gpt-oss-120b at TP 4 on A100s
(tests/fixtures/capacity/vllm_logs.yaml) printed 17.22 GiB where pdctl said 16.12.

Marlin's fused-MoE scratch (experts/marlin_moe.py `MarlinExperts.workspace_shapes`, held by
the WorkspaceManager from 0.23): (M x 4, max(N, K)) shared with the (M, K) output, and
(M x 4 x max(2N, K)), bf16. An A100-80GB's default batch is M = 2048 tokens:
  2048 x 4 x 3072 + 2048 x 4 x 5888 = 25,165,824 + 48,234,496 = 73,400,320 values
  x 2 bytes = 146,800,640 bytes (0.137 GiB).
"""

from __future__ import annotations

import pytest

from pdctl.capacity import quant
from pdctl.capacity.fit import Shape, instance_memory
from pdctl.capacity.gpus import GIB, find_gpu
from pdctl.capacity.memory import weights_bytes_per_gpu
from pdctl.capacity.params import model_config
from pdctl.capacity.profile import activation_bytes, moe_workspace_bytes
from pdctl.capacity.sampler import sampler_bytes
from pdctl.capacity.verdict import role_problem

OSS20 = "openai/gpt-oss-20b"
OSS120 = "openai/gpt-oss-120b"


@pytest.mark.parametrize(
    ("gpu", "backend"),
    [("H100-SXM", "triton"), ("H200", "triton"), ("A100-80GB", "marlin"),
     ("A100-40GB", "marlin"), ("L40S", "marlin"), ("L4", "marlin"), ("A10G", "marlin"),
     ("RTX-3090", "marlin"), ("RTX-4090", "marlin"), ("T4", None), ("", "triton")],
)
def test_backend_follows_the_compute_capability(gpu: str, backend: str | None) -> None:
    """Triton on sm90 to sm10x, Marlin from sm75 but mxfp4 needs sm80 (get_min_capability),
    so sm80-sm89 get Marlin and a T4 (sm75) is refused; no GPU named: Hopper as before."""
    assert quant.mxfp4_backend(gpu) == backend


def test_marlin_pads_width_to_128_and_hidden_to_256() -> None:
    oss = model_config(OSS120)
    assert quant.expert_dims(oss, 1, 0, "A100-80GB") == (2944, 3072)
    assert quant.expert_dims(oss, 4, 0, "A100-80GB") == (768, 3072)
    assert quant.expert_dims(oss, 2, 0, "L40S") == (1536, 3072)  # 1440 -> 1536
    assert quant.expert_dims(oss, 1, 0, "H100-SXM") == (3072, 2880)  # pdctl's Hopper figure
    # expert parallel: whole experts on a rank, the full width padded
    assert quant.expert_dims(oss, 4, 8, "A100-80GB") == (2944, 3072)


def test_expert_biases_are_bf16_over_the_padded_shapes() -> None:
    oss = model_config(OSS20)
    assert quant.expert_bias_bytes(oss, 1, 0, "A100-80GB") == 32 * (11776 + 6144)
    assert quant.expert_bias_bytes(oss, 1, 0, "H100-SXM") == 0


@pytest.mark.parametrize(
    ("name", "tp", "gpu", "delta"),
    [(OSS20, 1, "A100-80GB", 254_410_752), (OSS20, 1, "L40S", 254_410_752),
     (OSS120, 1, "A100-80GB", 1_526_464_512), (OSS120, 4, "A100-80GB", 1_125_384_192)],
)
def test_marlin_weights_over_hopper_weights(name: str, tp: int, gpu: str, delta: int) -> None:
    """Only the experts differ, by the hand-worked bytes of the module docstring."""
    oss = model_config(name)
    hopper = weights_bytes_per_gpu(oss, tp, gpu="H100-SXM")
    assert abs(weights_bytes_per_gpu(oss, tp, gpu=gpu) - hopper - delta) <= 2


def test_hopper_weights_do_not_move() -> None:
    """The measured H100 figure (64.48 GiB predicted, vLLM printed 64.38) is unchanged, with
    or without the GPU named."""
    oss = model_config(OSS120)
    assert weights_bytes_per_gpu(oss, 1) == weights_bytes_per_gpu(oss, 1, gpu="H100-SXM")
    assert weights_bytes_per_gpu(oss, 1) == weights_bytes_per_gpu(oss, 1, gpu="H200")
    assert round(weights_bytes_per_gpu(oss, 1) / GIB, 2) == 64.48


def test_marlin_workspace_at_the_a100_batch() -> None:
    oss = model_config(OSS20)
    assert moe_workspace_bytes(oss, 1, 2048, 2, "0.23.0", gpu_name="A100-80GB") == 146_800_640
    assert moe_workspace_bytes(oss, 1, 2048, 2, "0.23.0", gpu_name="H100-SXM") == 0
    assert moe_workspace_bytes(oss, 1, 2048, 2, "0.19.0", gpu_name="A100-80GB") == 0
    # it stays allocated under the sampler's peak, with the forward's hidden states (2048 x
    # 2880 bf16), as TritonExperts' does (profile.activation_bytes)
    peak = activation_bytes(oss, 1, 2048, 256, 2, "0.23.0", gpu_name="A100-80GB")
    sampler = sampler_bytes(oss, 256, "0.23.0", None, "A100-80GB")
    assert peak == sampler + 146_800_640 + 2048 * 2880 * 2


def test_a100_plan_takes_both_terms() -> None:
    """gpt-oss-120b, A100-80GB, util 0.9, 8,192 tokens, vLLM 0.23.0 (2,048 batched tokens,
    256 sequences): the padded experts (+1.422 GiB over the Hopper layout) and the workspace
    come out of the KV cache."""
    oss, gpu = model_config(OSS120), find_gpu("A100-80GB")
    mem = instance_memory(oss, gpu.usable_bytes, 0.9, Shape(
        max_model_len=8192, gpu=gpu.name, engine="0.23.0"))
    assert abs(mem.weights - weights_bytes_per_gpu(oss, 1, gpu="H100-SXM") - 1_526_464_512) <= 2
    sampler = sampler_bytes(oss, 256, "0.23.0", None, "A100-80GB")
    assert mem.overhead.activation == sampler + 146_800_640 + 2048 * 2880 * 2
    assert mem.fits


def test_t4_is_refused_with_vllms_words() -> None:
    oss = model_config(OSS20)
    text = quant.refusal(oss, "T4")
    assert "Minimum capability: 80. Current capability: 75." in text
    assert quant.refusal(oss, "A100-80GB") == ""
    gpu = find_gpu("T4")
    mem = instance_memory(oss, gpu.usable_bytes, 0.9, Shape(max_model_len=1024, gpu="T4"))
    assert not mem.fits and mem.refused

    class Role:
        role, fits, memory, slice, util, alternatives = "serve", False, mem, None, 0.9, ()

    line = role_problem(Role(), gpu)  # type: ignore[arg-type]
    assert line is not None and line.startswith("serve: vLLM refuses") and "T4" in line


def test_fp8_block_scales_on_ampere() -> None:
    """fp8 below sm89 runs through Marlin W8A16 (kernels/linear/scaled_mm/marlin.py): the
    128 x 128 fp32 block scales become one bf16 per 128 inputs of every output column,
    16/128 = 0.125 bit a weight (marlin_utils_fp8.py `prepare_fp8_layer_for_marlin`). An
    L40S (sm89) and an H100 keep the fp8 kernels and their 1/16,384 fp32 scales."""
    fp8 = model_config("Qwen/Qwen3-8B-FP8")
    assert fp8.weight_block == (128, 128)
    assert quant.linear_bits(fp8, 8.0, "A100-80GB") == 8.125
    assert quant.linear_bits(fp8, 8.0, "L40S") == 8.0
    assert quant.linear_bits(fp8, 8.0, "H100-SXM") == 8.0
    assert quant.linear_bits(model_config("Qwen/Qwen3-8B"), 16.0, "A100-80GB") == 16.0
    a100 = weights_bytes_per_gpu(fp8, 1, gpu="A100-80GB")
    h100 = weights_bytes_per_gpu(fp8, 1, gpu="H100-SXM")
    linear = fp8.params - fp8.embed_params  # the quantised layers
    assert abs((a100 - h100) - linear * 0.125 / 8) <= 2
