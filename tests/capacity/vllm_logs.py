"""Real vLLM start-up logs from public GitHub issues, as data, and pdctl's prediction of each.

Every case quotes what the log printed (GiB as printed, tokens as printed) and the conditions
the reporter gave (GPU, vLLM version, TP/PP, --gpu-memory-utilization, --max-model-len).
`predict(case)` runs pdctl's end-to-end model from those conditions only: the GPU's CUDA
total (the log's own `total_gpu_memory` where printed, else pdctl's GPU table), pdctl's
weights and overhead estimates, vLLM's KV layout. It never reads the observed figures.

`split`: "tune" cases were looked at while choosing the overhead constants in
pdctl/capacity/profile.py; "holdout" cases were not (they were added after the constants were
frozen) and are reported separately. `e2e` is False where the reporter did not give enough
(GPU or util unknown): such cases only check bytes per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pdctl.capacity import instance_memory, model_config
from pdctl.capacity.fit import Shape
from pdctl.capacity.gpus import GIB, find_gpu
from pdctl.capacity.memory import tokens_in
from pdctl.capacity.models import BUILTIN


@dataclass(frozen=True)
class Log:
    name: str
    url: str
    version: str  # the vLLM version the log came from ("0.7" = the V0 engine)
    gpu: str
    model: str
    tp: int = 1
    pp: int = 1
    util: float = 0.9
    max_model_len: int | None = None
    kv_cache_dtype: str = "auto"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool = False
    flashinfer: bool | None = None  # the log said FlashInfer sampled (None: not said)
    total_gib: float | None = None  # CUDA's total as the log printed it
    config: dict[str, Any] | None = None  # HF config values when the name is not built in
    # observed (None: the log did not print it)
    weights_gib: float | None = None
    activation_gib: float | None = None
    non_torch_gib: float | None = None
    kv_gib: float | None = None
    tokens: int | None = None
    fits: bool = True  # vLLM started (False: it refused: no memory for one request)
    used_gib: float = 0.0  # memory other processes held on the GPU, where the reporter said
    kind: str = ""
    split: str = "tune"
    e2e: bool = True
    note: str = ""
    tags: tuple[str, ...] = field(default=())

    @property
    def v1(self) -> bool:
        major, minor = (int(x) for x in self.version.split(".")[:2])
        return (major, minor) >= (0, 8)


_LLMD = "https://github.com/llm-d/llm-d-benchmark/blob/main/config_explorer/empirical-vllm-memory-results.md"
_DL = "https://github.com/dennislee22/vLLM-benchmarking/blob/main/log/"
# vllm/vllm-openai:latest between 0.11.1 (vllm#26859, FlashInfer sampler off) and 0.21 (graphs
# counted): pdctl's terms are the same for every version in that range
_LLMD_VERSION = "0.12"
_LLAMA70_FP8 = {**BUILTIN["llama-3.3-70b"], "quantization_config": {"quant_method": "fp8"}}
# Qwen2.5-VL-72B-Instruct's config.json: the Qwen2.5-72B language model behind a 32-layer
# vision tower (1280 wide, SwiGLU 3420, 2x2 patch merger to 8192)
_QWEN25_VL_72B = {
    **BUILTIN["qwen2.5-72b"],
    "vision_config": {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "hidden_act": "silu",
        "patch_size": 14,
        "spatial_merge_size": 2,
        "out_hidden_size": 8192,
    },
}
# Qwen2.5-VL-3B-Instruct's config.json: Qwen2.5-3B's language model (128k positions) behind
# the same 32-layer vision tower as the 72B, merged to 2048 wide
_QWEN25_VL_3B = {
    **BUILTIN["qwen2.5-3b"],
    "max_position_embeddings": 128000,
    "vision_config": {**_QWEN25_VL_72B["vision_config"], "out_hidden_size": 2048},
}
_QWEN3_30B_W4A16 = {
    **BUILTIN["qwen3-30b-a3b"],
    "quantization_config": {"quant_method": "compressed-tensors", "bits": 4},
}

LOGS: tuple[Log, ...] = (
    Log(
        "Llama-3.1-8B, RTX 3090, 20k",
        "https://github.com/vllm-project/vllm/issues/10517",
        "0.6.4",
        "RTX-3090",
        "meta-llama/Llama-3.1-8B-Instruct",
        util=0.9,
        max_model_len=20000,
        total_gib=23.58,
        weights_gib=14.99,
        activation_gib=2.07,
        non_torch_gib=0.35,
        kv_gib=3.81,
        tokens=1952 * 16,
        kind="dense GQA",
        tags=("V0", "PCIe"),
    ),
    Log(
        "Llama-3.1-8B, RTX 3090, 29k (refused)",
        "https://github.com/vllm-project/vllm/issues/10517",
        "0.6.4",
        "RTX-3090",
        "meta-llama/Llama-3.1-8B-Instruct",
        util=0.9,
        max_model_len=29000,
        total_gib=23.58,
        weights_gib=14.99,
        activation_gib=2.99,
        non_torch_gib=0.35,
        kv_gib=2.89,
        tokens=23648,
        fits=False,
        kind="dense GQA",
        tags=("V0",),
        note="the issue's 'fits but vLLM refused' case: V0 profiled a whole 29k prompt",
    ),
    Log(
        "Llama-3-8B, H100, TP1",
        "https://github.com/vllm-project/vllm/pull/10511",
        "0.6.5",
        "H100-SXM",
        "meta-llama/Meta-Llama-3-8B",
        util=0.9,
        max_model_len=8192,
        total_gib=79.22,
        weights_gib=14.96,
        activation_gib=1.26,
        non_torch_gib=1.79,
        kv_gib=53.29,
        kind="dense GQA",
        tags=("V0", "NVLink"),
    ),
    Log(
        "Llama-3-8B, H100, TP2",
        "https://github.com/vllm-project/vllm/pull/10511",
        "0.6.5",
        "H100-SXM",
        "meta-llama/Meta-Llama-3-8B",
        tp=2,
        util=0.9,
        max_model_len=8192,
        total_gib=79.22,
        weights_gib=7.48,
        activation_gib=1.26,
        non_torch_gib=3.58,
        kv_gib=58.97,
        kind="dense GQA, TP over NVLink",
        tags=("V0", "NVLink", "TP"),
        note="KV memory = 71.29 - 7.48 - 3.58 - 1.26, the printed terms (the line was cut)",
    ),
    Log(
        "R1-Distill-Qwen-14B, 2x RTX 4090 TP2 (refused)",
        "https://github.com/vllm-project/vllm/issues/13061",
        "0.7.2",
        "RTX-4090",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
        tp=2,
        util=0.98,
        max_model_len=131072,
        total_gib=23.55,
        weights_gib=13.95,
        activation_gib=0.19,
        non_torch_gib=0.25,
        tokens=81536,
        fits=False,
        kind="dense GQA, TP over PCIe",
        tags=("V0", "PCIe", "TP"),
        note="total = (13.95 + 0.25 + 0.19 + 8.69) / 0.98 from rank 0's printed terms; "
        "tokens are the smallest rank's, so rank 0's 8.69 GiB is not used",
    ),
    Log(
        "Qwen2.5-VL-72B, 4x A100-40GB TP4 (refused)",
        "https://github.com/vllm-project/vllm/issues/16570",
        "0.8.3",
        "A100-40GB",
        "Qwen/Qwen2.5-VL-72B-Instruct",
        tp=4,
        util=0.95,
        total_gib=39.38,
        config=_QWEN25_VL_72B,
        weights_gib=34.43,
        activation_gib=2.51,
        non_torch_gib=0.34,
        kv_gib=0.04,
        fits=False,
        kind="multimodal (vision tower from vision_config)",
        tags=("V0", "multimodal", "TP"),
        note="V0 worker path (0.8.3 printed V0's profiling lines)",
    ),
    Log(
        "Qwen3-235B-A22B-FP8, 4x H100 TP4",
        "https://github.com/vllm-project/vllm/issues/21348",
        "0.9.2",
        "H100-SXM",
        "Qwen/Qwen3-235B-A22B-FP8",
        flashinfer=False,  # inferred: `CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve` on a host (pip)
        tp=4,
        util=0.9,
        max_model_len=40960,
        kv_gib=8.11,
        tokens=178880,
        kind="MoE, FP8 weights, TP over NVLink",
        tags=("V1", "NVLink", "TP", "fp8"),
        note="version from the issue's date (2025-07); LMCacheConnectorV1 on",
    ),
    Log(
        "gpt-oss-120b, H100, 0.10.1 (refused)",
        "https://github.com/vllm-project/vllm/issues/23278",
        "0.10.1",
        "H100-SXM",
        "openai/gpt-oss-120b",
        flashinfer=False,  # pip in a conda env (/home/ubuntu/miniconda3/envs/... in the traceback)
        util=0.9,
        max_model_len=131072,
        weights_gib=65.97,
        kv_gib=-2.14,
        fits=False,
        kind="MoE mxfp4, sliding window",
        tags=("V1", "hybrid"),
    ),
    Log(
        "gpt-oss-120b, H100, util 0.95 (refused)",
        "https://github.com/vllm-project/vllm/issues/27508",
        "0.11.0",
        "H100-SXM",
        "openai/gpt-oss-120b",
        flashinfer=False,  # pip in a conda env (/opt/conda/envs/vllm_env/... in the traceback)
        util=0.95,
        max_model_len=131072,
        max_num_batched_tokens=1024,
        kv_gib=1.71,
        fits=False,
        kind="MoE mxfp4, sliding window",
        tags=("V1", "hybrid"),
        split="tune",
    ),
    Log(
        "Qwen3-30B-A3B w4a16, RTX 3090, V0",
        "https://github.com/vllm-project/vllm/issues/17327",
        "0.7",
        "RTX-3090",
        "Qwen3-30B-A3B.w4a16",
        util=0.9,
        max_model_len=40960,
        max_num_seqs=8,
        total_gib=23.56,
        config=_QWEN3_30B_W4A16,
        weights_gib=15.68,
        activation_gib=0.12,
        non_torch_gib=0.06,
        kv_gib=5.34,
        kind="MoE, int4 weights",
        tags=("V0", "int4"),
        split="tune",
        note="vLLM 0.8.5 with VLLM_USE_V1=0: the V0 engine",
    ),
    Log(
        "Qwen2.5-7B int4, RTX 4060 8GB (refused)",
        "https://github.com/vllm-project/vllm/issues/13882",
        "0.7.3",
        "RTX-4060",
        "Qwen/Qwen2.5-7B-Instruct-AWQ",
        util=0.7,
        max_model_len=4096,
        total_gib=8.0,
        weights_gib=5.20,
        activation_gib=1.42,
        non_torch_gib=0.03,
        kv_gib=-1.05,
        fits=False,
        kind="dense GQA, int4",
        tags=("V0", "int4"),
        split="tune",
        note="a 4-bit checkpoint assumed from the 5.20 GiB weights",
    ),
    # llm-d-benchmark: vllm/vllm-openai:latest (V1) on one H100 node, 79.18 GiB,
    # --max-model-len 16000, --block-size 128 --enable-prefix-caching, DEBUG logs with every
    # term. The first pass called these 0.11.0; the page names no version for them (only the
    # Mistral run says 0.11.0) and was published 2026-01-27 (llm-d-benchmark#622), when
    # "latest" was past 0.11.1: see _LLMD_VERSION.
    Log(
        "Llama-3.1-8B, H100 (llm-d)",
        _LLMD,
        _LLMD_VERSION,
        "H100-SXM",
        "meta-llama/Llama-3.1-8B-Instruct",
        max_model_len=16000,
        total_gib=79.18,
        weights_gib=14.99,
        activation_gib=4.76,
        non_torch_gib=0.13,
        kv_gib=51.38,
        kind="dense GQA",
        tags=("V1",),
    ),
    Log(
        "Qwen3-0.6B, H100 (llm-d)",
        _LLMD,
        _LLMD_VERSION,
        "H100-SXM",
        "Qwen/Qwen3-0.6B",
        max_model_len=16000,
        total_gib=79.18,
        weights_gib=1.12,
        activation_gib=5.56,
        non_torch_gib=0.13,
        kv_gib=64.45,
        kind="dense GQA, tied embeddings",
        tags=("V1",),
    ),
    Log(
        "gpt-oss-20b, H100 (llm-d)",
        _LLMD,
        _LLMD_VERSION,
        "H100-SXM",
        "openai/gpt-oss-20b",
        max_model_len=16000,
        total_gib=79.18,
        weights_gib=13.47,
        activation_gib=7.38,
        non_torch_gib=0.13,
        kv_gib=50.28,
        kind="MoE mxfp4, sliding window",
        tags=("V1", "hybrid"),
    ),
    Log(
        "Qwen3-0.6B, H100, 32k (llm-d)",
        _LLMD,
        _LLMD_VERSION,
        "H100-SXM",
        "Qwen/Qwen3-0.6B",
        max_model_len=32000,
        total_gib=79.18,
        weights_gib=1.12,
        activation_gib=5.56,
        non_torch_gib=0.13,
        kv_gib=64.45,
        kind="dense GQA",
        tags=("V1",),
        split="holdout",
    ),
    Log(
        "gpt-oss-120b, H100 (llm-d)",
        _LLMD,
        _LLMD_VERSION,
        "H100-SXM",
        "openai/gpt-oss-120b",
        # util 0.95, not the page's "0.9 (default)": vLLM's own sum (mem_utils.py
        # `memory_profiling`: available = requested - weights - peak - non-torch) gives the
        # printed 3.33 GiB only from 0.95 x 79.18 = 75.22 GiB (75.22 - 64.38 - 7.38 - 0.13);
        # at 0.9 it is -0.63 and vLLM refuses. The page's other six rows add up at 0.9.
        util=0.95,
        max_model_len=16000,
        total_gib=79.18,
        weights_gib=64.38,
        activation_gib=7.38,
        non_torch_gib=0.13,
        kv_gib=3.33,
        kind="MoE mxfp4, sliding window",
        tags=("V1", "hybrid"),
        split="holdout",
        note="util corrected from the printed terms (0.9 on the page)",
    ),
    Log(
        "Llama-3.3-70B-FP8, 2x H100 TP2 (llm-d)",
        _LLMD,
        _LLMD_VERSION,
        "H100-SXM",
        "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
        tp=2,
        max_model_len=16000,
        total_gib=79.18,
        config=_LLAMA70_FP8,
        weights_gib=33.88,
        activation_gib=4.84,
        non_torch_gib=0.55,
        kv_gib=32.00,
        kind="dense, FP8 weights, TP over NVLink",
        tags=("V1", "fp8", "TP", "NVLink"),
        split="holdout",
    ),
    Log(
        "Llama-3.3-70B-FP8, H100 TP1 (llm-d, refused)",
        _LLMD,
        _LLMD_VERSION,
        "H100-SXM",
        "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
        max_model_len=16000,
        total_gib=79.18,
        config=_LLAMA70_FP8,
        weights_gib=67.72,
        activation_gib=4.84,
        non_torch_gib=0.14,
        kv_gib=-1.44,
        fits=False,
        kind="dense, FP8 weights",
        tags=("V1", "fp8"),
        split="holdout",
    ),
    Log(
        "Qwen3-32B, H100 (llm-d)",
        _LLMD,
        _LLMD_VERSION,
        "H100-SXM",
        "Qwen/Qwen3-32B",
        max_model_len=16000,
        total_gib=79.18,
        weights_gib=61.03,
        activation_gib=5.64,
        non_torch_gib=0.14,
        kv_gib=4.45,
        kind="dense GQA",
        tags=("V1",),
        split="holdout",
    ),
    Log(
        "Qwen3-32B, H100, 32k (llm-d, refused)",
        _LLMD,
        _LLMD_VERSION,
        "H100-SXM",
        "Qwen/Qwen3-32B",
        max_model_len=32000,
        total_gib=79.18,
        weights_gib=61.03,
        activation_gib=5.64,
        non_torch_gib=0.14,
        fits=False,
        kind="dense GQA",
        tags=("V1",),
        split="holdout",
        note="the same 4.45 GiB cannot hold one 32000-token sequence (7.81 GiB)",
    ),
    Log(
        "Qwen3-32B, 2x H100 TP2 (llm-d)",
        _LLMD,
        _LLMD_VERSION,
        "H100-SXM",
        "Qwen/Qwen3-32B",
        tp=2,
        max_model_len=16000,
        total_gib=79.18,
        weights_gib=30.59,
        activation_gib=5.64,
        non_torch_gib=0.54,
        kv_gib=34.49,
        kind="dense GQA, TP over NVLink",
        tags=("V1", "TP", "NVLink"),
        split="holdout",
    ),
    Log(
        "Mistral-Small-3.2-24B, H100 (llm-d)",
        _LLMD,
        "0.11.0",
        "H100-SXM",
        "mistralai/Mistral-Small-3.2-24B-Instruct-2506",
        util=0.95,
        max_model_len=16000,
        total_gib=79.18,
        weights_gib=44.76,
        activation_gib=2.12,
        non_torch_gib=0.14,
        kv_gib=28.20,
        tokens=184832,
        kind="multimodal (Pixtral tower), FlashInfer sampler",
        tags=("V1", "multimodal"),
        note="the page says vLLM 0.11.0; held out in the first pass, TUNED ON in the second "
        "(its 2.12 GiB profile peak is the FlashInfer-only sampler of 0.9-0.11.0)",
        split="tune",
    ),
    # dennislee22/vLLM-benchmarking: full start-up logs, vLLM 0.10.1.1 (V1) on A100s,
    # --max-model-len 16384. Held out in the first pass. In the second pass the four Qwen2-7B
    # runs on A100-80GB were TUNED ON (FLASHINFER_BYTES_PER_LOGIT was fitted on them), so they
    # moved to "tune"; the A100-40GB and gpt-oss-120b runs were not used and stay held out.
    Log(
        "Qwen2-7B, A100-80GB, util 0.25",
        _DL + "vllm-7B-1gpuA10080GB-0.25GRAM.log",
        "0.10.1",
        "A100-80GB",
        "Qwen/Qwen2-7B-Instruct",
        util=0.25,
        max_model_len=16384,
        weights_gib=14.25,
        kv_gib=5.01,
        tokens=93872,
        kind="dense GQA",
        tags=("V1",),
        split="tune",
    ),
    Log(
        "Qwen2-7B, A100-80GB, util 0.5",
        _DL + "vllm-7B-1gpuA10080GB-0.5GRAM.log",
        "0.10.1",
        "A100-80GB",
        "Qwen/Qwen2-7B-Instruct",
        util=0.5,
        max_model_len=16384,
        weights_gib=14.25,
        kv_gib=24.83,
        tokens=464848,
        kind="dense GQA",
        tags=("V1",),
        split="tune",
    ),
    Log(
        "Qwen2-7B, 2x A100-80GB TP2, util 0.25",
        _DL + "vllm-7B-2gpuA10080GB-0.25GRAM-same-node.log",
        "0.10.1",
        "A100-80GB PCIe",  # "Custom allreduce is disabled because your platform lacks GPU P2P"
        "Qwen/Qwen2-7B-Instruct",
        tp=2,
        util=0.25,
        max_model_len=16384,
        weights_gib=7.12,
        kv_gib=12.02,
        tokens=450192,
        kind="dense GQA, TP",
        tags=("V1", "TP"),
        split="tune",
    ),
    Log(
        "Qwen2-7B, 2x A100-80GB TP2, util 0.5",
        _DL + "vllm-7B-2gpuA10080GB-0.5GRAM-same-node.log",
        "0.10.1",
        "A100-80GB PCIe",  # "Custom allreduce is disabled because your platform lacks GPU P2P"
        "Qwen/Qwen2-7B-Instruct",
        tp=2,
        util=0.5,
        max_model_len=16384,
        weights_gib=7.12,
        kv_gib=31.83,
        tokens=1192160,
        kind="dense GQA, TP",
        tags=("V1", "TP"),
        split="tune",
    ),
    Log(
        "Qwen2-7B, 2x A100-40GB TP2 over 2 nodes, util 0.5",
        _DL + "vllm-7B-2gpuA10040GB-0.5GRAM-diff-nodes.log",
        "0.10.1",
        "A100-40GB PCIe",
        "Qwen/Qwen2-7B-Instruct",
        flashinfer=False,  # "FlashInfer is not available. Falling back to the PyTorch-native"
        tp=2,
        util=0.5,
        max_model_len=16384,
        weights_gib=7.12,
        kv_gib=11.03,
        tokens=412944,
        kind="dense GQA, TP across nodes (Ray)",
        tags=("V1", "TP", "PCIe"),
        split="holdout",
        note="TP over the network: no NVLink, no custom all-reduce",
    ),
    Log(
        "gpt-oss-120b, 4x A100-80GB TP4 over nodes, util 0.8",
        _DL + "vllm-120B-4gpuA10080GB-0.8GRAM-diff-nodes.log",
        "0.10.1",
        "A100-80GB PCIe",
        "openai/gpt-oss-120b",
        tp=4,
        util=0.8,
        max_model_len=16384,
        weights_gib=17.22,
        kv_gib=45.32,
        tokens=2640144,
        kind="MoE mxfp4, sliding window, TP across nodes",
        tags=("V1", "hybrid", "TP", "PCIe"),
        split="holdout",
    ),
    # a blog's full start-up log (vLLM 0.19.0 banner, A100 80GB); the issue's "gpt-oss-20b on
    # A100: -11.8%" came from this configuration, so the first pass tuned on it
    Log(
        "gpt-oss-20b, A100-80GB, util 0.65",
        "https://myoceane.fr/index.php/ai-vllm-a100-gemma-4/",
        "0.19.0",
        "A100-80GB",
        "openai/gpt-oss-20b",
        util=0.65,
        max_model_len=131072,
        weights_gib=13.72,
        kv_gib=36.56,
        kind="MoE mxfp4, sliding window",
        tags=("V1", "hybrid"),
        split="tune",
    ),
    # added in the second pass after every constant was fixed, evaluated once: held out.
    # The GPU is the repository's (demo_env_l4) and fits the log ("Not enough SMs to use
    # max_autotune_gemm mode"); "FlashInfer is not available" (pip).
    Log(
        "Llama-3.1-8B, L4, 32k, 128 seqs",
        "https://github.com/abinavChandar/demo_env_l4/blob/main/vllm.log",
        "0.11.0",
        "L4",
        "meta-llama/Llama-3.1-8B-Instruct",
        util=0.92,
        max_model_len=32000,
        max_num_seqs=128,
        flashinfer=False,
        weights_gib=14.99,
        kv_gib=4.75,
        tokens=38944,
        kind="dense GQA, 24 GB card",
        tags=("V1", "PCIe"),
        split="holdout",
    ),
    # third pass: added after the NVLS term and the llm-d util correction, evaluated once
    # (held out, tag "pass3"); never tuned on.
    Log(
        "Qwen2.5-VL-3B, A100-80GB, util 0.3 (refused)",
        "https://github.com/vllm-project/vllm/issues/18124",
        "0.8.5",
        "A100-80GB",
        "Qwen/Qwen2.5-VL-3B-Instruct",
        util=0.3,
        max_model_len=128000,
        config=_QWEN25_VL_3B,
        fits=False,
        kind="multimodal (vision tower), small dense GQA",
        tags=("V1", "multimodal", "pass3"),
        split="holdout",
        note="`vllm serve Qwen/Qwen2.5-VL-3B-Instruct --gpu-memory-utilization 0.3` on an 80 GB "
        "card: 'No available memory for the cache blocks'; version from the pip list "
        "(May 2025, V1 engine); max-model-len is the model's own (128000)",
    ),
    # fourth pass: added after the encoder budget followed vLLM, evaluated once (held out,
    # tag "pass4"); never tuned on. The first was a bytes-per-token-only row before: the PR's
    # reproducer gives the command (default util 0.9, --max-model-len 1024, eager, TP 2 x PP 2
    # on four L4s: "device_name=NVIDIA_L4" in its MoE warning; "FlashInfer is not available").
    Log(
        "DeepSeek-V2-Lite, 4x L4 TP2 PP2",
        "https://github.com/vllm-project/vllm/pull/20665",
        "0.9.2",
        "L4",
        "deepseek-ai/DeepSeek-V2-Lite",
        tp=2,
        pp=2,
        util=0.9,
        max_model_len=1024,
        enforce_eager=True,
        flashinfer=False,
        kv_gib=12.13,
        tokens=807792,
        kind="MoE + MLA, PP over PCIe",
        tags=("V1", "MLA", "PP", "PCIe", "TP", "pass4", "srcfix"),
        # held out in the fourth pass (-10.1%), then used to find a source-based bug (the
        # sampler on the last PP stage only, KV the minimum over stages): no longer held out
        split="tune",
        note="a dev build of July 2025 (0.1.dev7548, between 0.9.2 and 0.10.0); ranks 0/1 (first "
        "stage, 14 of 27 layers) printed 12.13 GiB, ranks 2/3 11.33 GiB; the tokens are rank 0's",
    ),
    Log(
        "DeepSeek-R1, H100 TP1 (llm-d, refused)",
        _LLMD,
        _LLMD_VERSION,
        "H100-SXM",
        "deepseek-ai/DeepSeek-R1",
        util=0.9,
        max_model_len=16000,
        total_gib=79.18,
        fits=False,
        kind="MoE + MLA, FP8 weights",
        tags=("V1", "MLA", "fp8", "pass4"),
        split="holdout",
        note="out of memory while loading the FP8 weights (671B) on one GPU: a verdict only",
    ),
    Log(
        "Qwen3-8B, A800-80GB, util 0.4 (refused)",
        "https://github.com/vllm-project/vllm/issues/17431",
        "0.8.5",
        "A100-80GB",
        "Qwen/Qwen3-8B",
        util=0.4,
        max_model_len=40960,
        fits=False,
        kind="dense GQA",
        tags=("V1", "pass4"),
        split="holdout",
        note="A800 = the A100-80GB's export variant (same 80 GB); the same command with "
        "VLLM_USE_V1=0 started: V1 0.8.x counted other processes' memory on the card",
    ),
    # bytes-per-token only: the reporter did not give the GPU or the util
    Log(
        "Qwen3-14B, one GPU",
        "https://github.com/LMCache/LMCache/issues/1739",
        "0.11.0",
        "H100-SXM",
        "Qwen/Qwen3-14B",
        max_model_len=32768,
        kv_gib=6.51,
        tokens=42656,
        e2e=False,
        kind="dense GQA",
        tags=("V1",),
    ),
    Log(
        "Qwen3-30B-A3B-FP8, fp8 KV",
        "https://github.com/vllm-project/vllm/issues/25350",
        "0.10.2",
        "H100-SXM",
        "Qwen/Qwen3-30B-A3B-FP8",
        max_model_len=100000,
        kv_cache_dtype="fp8",
        weights_gib=29.09,
        kv_gib=10.55,
        tokens=230528,
        e2e=False,
        kind="MoE, fp8 KV",
        tags=("V1", "fp8"),
    ),
)


def shape(log: Log) -> Shape:
    return Shape(
        tp=log.tp,
        pp=log.pp,
        kv_cache_dtype=log.kv_cache_dtype,
        max_model_len=log.max_model_len,
        max_num_seqs=log.max_num_seqs,
        max_num_batched_tokens=log.max_num_batched_tokens,
        enforce_eager=log.enforce_eager,
        gpu=log.gpu,
        engine=log.version,
        flashinfer_sampler=log.flashinfer,
    )


def total_bytes(log: Log) -> int:
    if log.total_gib is not None:
        return int(log.total_gib * GIB)
    return find_gpu(log.gpu).usable_bytes


@dataclass(frozen=True)
class Prediction:
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    graphs_gib: float
    kv_gib: float
    tokens: int
    fits: bool


def predict(log: Log) -> Prediction:
    """pdctl's end-to-end prediction from the log's conditions only."""
    model = model_config(log.model, log.config)
    mem = instance_memory(model, total_bytes(log), log.util, shape(log), int(log.used_gib * GIB))
    g = GIB
    return Prediction(
        mem.weights / g,
        mem.overhead.activation / g,
        mem.overhead.non_torch / g,
        mem.overhead.cuda_graphs / g,
        mem.kv_available / g,
        mem.kv_tokens,
        mem.fits,
    )


def token_error(log: Log, p: Prediction) -> float | None:
    """Per cent error of the printed KV tokens (None where not printed; a refusal prints
    them too: 'the maximum number of tokens that can be stored in KV cache (N)')."""
    if log.tokens is None:
        return None
    return (p.tokens - log.tokens) / log.tokens * 100


def kv_error(log: Log, p: Prediction) -> float | None:
    """Per cent error of the printed 'Available KV cache memory' (None where not printed or
    tiny: a near-zero or negative figure makes a percentage meaningless)."""
    if log.kv_gib is None or log.kv_gib < 0.5:
        return None
    return (p.kv_gib - log.kv_gib) / log.kv_gib * 100


def bytes_per_token_tokens(log: Log) -> int | None:
    """Tokens predicted from the log's OWN available memory (checks the KV layout only)."""
    if log.kv_gib is None or log.tokens is None:
        return None
    mem = instance_memory(model_config(log.model, log.config), 80 * GIB, 0.9, shape(log))
    if mem.layout is not None:
        return mem.layout.tokens(int(log.kv_gib * GIB), mem.max_model_len)
    return tokens_in(int(log.kv_gib * GIB), mem.kv_per_token, mem.block_size)
