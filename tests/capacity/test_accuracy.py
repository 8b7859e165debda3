"""pdctl's KV figures against REAL vLLM startup logs quoted in public GitHub issues.

Each case quotes the log lines. The token check takes the log's own "Available KV cache
memory" (or V0's kv_cache_size) and predicts "GPU KV cache size" as
available / (KV bytes per token) in whole 16-token blocks; it must be within 2% (the log
rounds GiB to 0.01, and with several workers vLLM takes the smallest). Bytes per token are
checked exactly where the log gives a byte-exact figure. `python -m tests.capacity.test_accuracy`
prints the error table.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pdctl.capacity import kv_bytes_per_token, model_config, weights_bytes_per_gpu
from pdctl.capacity.gpus import GIB
from pdctl.capacity.memory import tokens_in


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # dense / MoE / MLA, GQA
    url: str
    quote: str
    model: str
    tp: int
    pp: int
    kv_cache_dtype: str
    available_gib: float
    real_tokens: int
    block: int = 16


CASES = (
    Case(
        "Llama-3.1-8B, RTX 3090, 20k", "dense GQA (8 KV heads)",
        "https://github.com/vllm-project/vllm/issues/10517",
        "kv_cache_size=3.81GiB gpu_memory_utilization=0.90 / GPU blocks: 1952",
        "meta-llama/Llama-3.1-8B-Instruct", 1, 1, "auto", 3.81, 1952 * 16,
    ),
    Case(
        "Llama-3.1-8B, RTX 3090, 29k", "dense GQA (8 KV heads)",
        "https://github.com/vllm-project/vllm/issues/10517",
        "kv_cache_size=2.89GiB ... maximum number of tokens that can be stored in KV cache "
        "(23648)",
        "meta-llama/Llama-3.1-8B-Instruct", 1, 1, "auto", 2.89, 23648,
    ),
    Case(
        "Qwen3-14B, 1 GPU", "dense GQA (8 KV heads, head_dim 128)",
        "https://github.com/LMCache/LMCache/issues/1739",
        "Available KV cache memory: 6.51 GiB / GPU KV cache size: 42,656 tokens",
        "Qwen/Qwen3-14B", 1, 1, "auto", 6.51, 42656,
    ),
    Case(
        "Qwen3-235B-A22B-FP8, 4xH100 TP4", "MoE, GQA 4 KV heads / TP 4 = 1 per GPU",
        "https://github.com/vllm-project/vllm/issues/21348",
        "Available KV cache memory: 8.11 GiB / GPU KV cache size: 178,880 tokens",
        "Qwen/Qwen3-235B-A22B-FP8", 4, 1, "auto", 8.11, 178880,
    ),
    Case(
        "DeepSeek-V2-Lite, 4xL4 TP2 PP2", "MoE + MLA (latent 576, not split by TP), PP",
        "https://github.com/vllm-project/vllm/pull/20665",
        "rank 0/1: Available KV cache memory: 12.13 GiB (ranks 2/3: 11.33 GiB) / "
        "GPU KV cache size: 807,792 tokens",
        "deepseek-ai/DeepSeek-V2-Lite", 2, 2, "auto", 12.13, 807792,
    ),
    Case(
        "Qwen3-30B-A3B-class FP8, fp8 KV", "MoE, GQA 4 KV heads, fp8 KV cache",
        "https://github.com/vllm-project/vllm/issues/25350",
        "with kv-cache-dtype fp8 ... Available KV cache memory: 10.55 GiB / "
        "GPU KV cache size: 230,528 tokens",
        "Qwen/Qwen3-30B-A3B-FP8", 1, 1, "fp8", 10.55, 230528,
    ),
)


def predict(case: Case) -> int:
    model = model_config(case.model)
    per_token = kv_bytes_per_token(model, case.tp, case.pp, case.kv_cache_dtype)
    return tokens_in(int(case.available_gib * GIB), per_token, case.block)


def error(case: Case) -> float:
    return (predict(case) - case.real_tokens) / case.real_tokens * 100


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kv_token_capacity_matches_the_real_log(case: Case) -> None:
    assert abs(error(case)) < 2.0, (case.name, predict(case), case.real_tokens)


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


def table() -> str:
    rows = ["| case | model kind | real tokens | predicted | error % | source |",
            "|---|---|---:|---:|---:|---|"]
    for c in CASES:
        rows.append(f"| {c.name} | {c.kind} | {c.real_tokens:,} | {predict(c):,} | "
                    f"{error(c):+.2f} | {c.url} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
