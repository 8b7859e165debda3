"""pdctl's KV and weight bytes, exact where a real vLLM log quoted in a public GitHub issue
gives a byte-exact figure. (Tokens from each log's own "Available KV cache memory" are checked
for every case of tests/fixtures/capacity/vllm_logs.yaml by tests/capacity/test_vllm_logs.py.)
"""

from __future__ import annotations

from pdctl.capacity import kv_bytes_per_token, model_config, weights_bytes_per_gpu
from pdctl.capacity.gpus import GIB
from pdctl.capacity.memory import tokens_in


def test_mla_bytes_per_token_exact_deepseek_v2_lite() -> None:
    # https://github.com/vllm-project/vllm/issues/15871 (DeepSeek-V2-Lite-Chat, 32768 tokens):
    # "To serve at least one request with the models's max seq len (32768), (0.95 GiB KV cache
    # is needed". MLA: 27 layers x (512 + 64) x 2 bytes = 31,104 B per token on every TP rank.
    model = model_config("deepseek-ai/DeepSeek-V2-Lite-Chat")
    assert kv_bytes_per_token(model) == 31104
    assert kv_bytes_per_token(model, tp=2) == 31104  # the latent is not split by TP
    assert round(31104 * 32768 / GIB, 2) == 0.95


def test_fp8_kv_bytes_exact_from_the_log_needed_figure() -> None:
    # Same issue as the fp8 case (vllm#25350): "max seq len (221000), (10.12 GiB KV cache is
    # needed" and "estimated maximum model length is 122080" from 5.59 GiB.
    model = model_config("Qwen/Qwen3-30B-A3B-FP8")
    per_token = kv_bytes_per_token(model, kv_cache_dtype="fp8")
    assert per_token == 2 * 48 * 4 * 128 * 1 == 49152
    assert round(per_token * 221000 / GIB, 2) == 10.12
    assert abs(tokens_in(int(5.59 * GIB), per_token) - 122080) / 122080 < 0.002


def test_weights_match_vllm_model_loading_lines() -> None:
    # vllm PR #10511: Meta-Llama-3-8B on H100 "model weights take 14.96GiB", "-tp 2": 7.48GiB.
    llama = model_config("meta-llama/Meta-Llama-3-8B")
    assert round(weights_bytes_per_gpu(llama) / GIB, 2) == 14.96
    assert round(weights_bytes_per_gpu(llama, tp=2) / GIB, 2) == 7.48
    # vllm#33155: gpt-oss-120b on one H100 "Model loading took 64.38 GiB memory" (mxfp4).
    oss = model_config("openai/gpt-oss-120b")
    assert abs(weights_bytes_per_gpu(oss) / GIB - 64.38) / 64.38 < 0.01
