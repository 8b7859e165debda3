"""pdctl's capacity model against the real vLLM start-up logs of tests/capacity/vllm_logs.py.

The figures asserted are the ones benchmarks/capacity_logs.py reports (docs/capacity.md).
Known misses are listed by name: when one is fixed the test says so, and the table and the
docs must be updated with it.
"""

from __future__ import annotations

import pytest

from pdctl.capacity import instance_memory, model_config
from pdctl.capacity.fit import stage_memories
from pdctl.capacity.gpus import GIB, find_gpu
from tests.capacity.vllm_logs import (
    LOGS,
    Log,
    bytes_per_token_tokens,
    kv_error,
    predict,
    shape,
    token_error,
    total_bytes,
)

E2E = [log for log in LOGS if log.e2e]
# Where pdctl's verdict is wrong today, and why (docs/capacity.md, "Where it is still wrong").
# (gpt-oss-120b on one H100 (llm-d) was here: its run used util 0.95, see
# test_printed_terms_add_up_as_vllm_sums_them.)
KNOWN_WRONG_VERDICT = {
    # third-pass held out, not tuned to. The encoder profile now takes the largest item as
    # vLLM does (one 16,384-token image: ~1.6 GiB, below what a refusal needs: > 16 GiB).
    # Most likely cause, from the source: vLLM 0.8.x's V1 worker (`determine_available_memory`)
    # counted the whole card's used memory (mem_get_info total - free) minus torch's as
    # "non-torch", so other processes on a shared card (util 0.3 of an 80 GB A100) came out of
    # the budget (vllm#17366, vllm#17431: V1 0.8.5 refuses where V0 starts). Modelled now
    # (`instance_memory(..., used=)`, `pdctl plan --facts`), but the issue does not say what
    # else was on the card, so the case carries no figure: a refusal needs > 10.75 GiB there.
    "Qwen2.5-VL-3B, A100-80GB, util 0.3 (refused)",
    # fourth-pass held out, the same cause shown directly: the same command started on V0;
    # the issue gives no figure either (a refusal needs > 9.39 GiB held by others)
    "Qwen3-8B, A800-80GB, util 0.4 (refused)",
}


def _capacity_error(log: Log) -> float | None:
    p = predict(log)
    tok = token_error(log, p)
    return tok if tok is not None else kv_error(log, p)


def test_the_table_is_big_and_varied_enough() -> None:
    assert len(LOGS) >= 30
    assert all(log.url.startswith("https://") for log in LOGS)
    gpus = {find_gpu(log.gpu).name for log in E2E}
    assert len(gpus) >= 5, gpus
    tags = {tag for log in LOGS for tag in log.tags}
    assert {"V1", "V0", "TP", "NVLink", "PCIe", "hybrid", "multimodal", "fp8", "MLA", "PP"} <= tags
    # 10: the second pass moved five first-pass held-out cases it tuned on to "tune" and
    # added one new one (the L4)
    assert sum(1 for log in E2E if log.split == "holdout") >= 10


@pytest.mark.parametrize(
    "log", [x for x in LOGS if x.kv_gib is not None and x.tokens is not None], ids=lambda x: x.name
)
def test_kv_layout_turns_the_logs_own_memory_into_its_tokens(log: Log) -> None:
    # Bytes per token, MLA latents, fp8 KV, PP stages and the hybrid (sliding-window) pool:
    # from the log's own "Available KV cache memory" to its "GPU KV cache size".
    predicted = bytes_per_token_tokens(log)
    assert predicted is not None
    # within 1.5%: all but one case are within 0.1%; Qwen3-235B-FP8 (LMCache connector on)
    # is 1.1% off, unexplained
    assert abs(predicted - log.tokens) / log.tokens < 0.015, (predicted, log.tokens)


@pytest.mark.parametrize("log", E2E, ids=lambda x: x.name)
def test_fit_verdict_matches_what_vllm_did(log: Log) -> None:
    right = predict(log).fits == log.fits
    assert right != (log.name in KNOWN_WRONG_VERDICT), (
        "a known miss is fixed: update KNOWN_WRONG_VERDICT, the table and docs/capacity.md"
        if right
        else f"{log.name}: pdctl says fits={not log.fits}, vLLM said {log.fits}"
    )


def test_the_issue_case_29k_llama_on_a_24gb_card_does_not_fit() -> None:
    case = next(log for log in LOGS if log.name.startswith("Llama-3.1-8B, RTX 3090, 29k"))
    assert not case.fits and not predict(case).fits


def test_pp_stages_as_vllm_profiles_them() -> None:
    # DeepSeek-V2-Lite at TP 2 x PP 2 was -10.1% when first evaluated (held out, fourth pass):
    # pdctl charged the sampler, which `profile_run` runs only `if get_pp_group().is_last_rank`,
    # to the first stage. Each stage now profiles its own part and the KV tokens are the
    # fewest over stages (`unify_kv_cache_configs`); the case is no longer held out.
    case = next(log for log in LOGS if log.name == "DeepSeek-V2-Lite, 4x L4 TP2 PP2")
    error = _capacity_error(case)
    assert error is not None and abs(error) <= 5, error
    model = model_config(case.model, case.config)
    total = total_bytes(case)
    assert instance_memory(model, total, case.util, shape(case)).stage == 0
    first, last = stage_memories(model, total, case.util, shape(case))
    # ranks 0/1 (14 of 27 layers, the embedding) printed 12.13 GiB and set the tokens;
    # ranks 2/3 (13 layers, the lm_head, the sampler) printed 11.33 GiB
    assert first.kv_tokens < last.kv_tokens
    assert last.overhead.activation > first.overhead.activation  # the sampler
    assert abs(last.kv_available / GIB - 11.33) / 11.33 < 0.02, last.kv_available / GIB


def test_v1_end_to_end_error_distribution() -> None:
    # Regression guard for the figures docs/capacity.md reports (vLLM 0.8 and later).
    errors = [e for log in E2E if log.v1 and log.fits if (e := _capacity_error(log)) is not None]
    assert len(errors) >= 15
    within5 = sum(1 for e in errors if abs(e) <= 5)
    assert within5 >= 19, sorted(errors)  # all 19 since the PP stages (fifth pass)
    held = [
        e
        for log in E2E
        if log.v1 and log.fits and log.split == "holdout"
        if (e := _capacity_error(log)) is not None
    ]
    # 8 held-out cases with an error since the second pass moved the four A100-80GB Qwen2-7B
    # runs and Mistral-Small-3.2 to "tune" (the FlashInfer sampler was fitted on them)
    assert len(held) >= 8
    assert sum(1 for e in held if abs(e) <= 5) >= 7, sorted(held)


def test_v1_goal_on_the_tuned_and_first_held_out_cases() -> None:
    # The issue's goal on the 18 V1 cases of the first two passes: >= 90% within 5%, none
    # beyond 15% (gpt-oss-120b on one H100 was -122%, Qwen3-235B-FP8 at TP 4 +26%).
    errors = {
        log.name: e
        for log in E2E
        if log.v1 and log.fits and "pass3" not in log.tags and "pass4" not in log.tags
        if (e := _capacity_error(log)) is not None
    }
    assert max(abs(e) for e in errors.values()) <= 15, errors
    assert sum(1 for e in errors.values() if abs(e) <= 5) >= 0.9 * len(errors), errors


@pytest.mark.parametrize(
    "log",
    [
        x
        for x in E2E
        if "V0" not in x.tags  # the V0 worker's sum differs
        and None not in (x.total_gib, x.weights_gib, x.activation_gib, x.non_torch_gib, x.kv_gib)
    ],
    ids=lambda x: x.name,
)
def test_printed_terms_add_up_as_vllm_sums_them(log: Log) -> None:
    # vLLM's own sum (utils/mem_utils.py `memory_profiling`, gpu_worker.py
    # `determine_available_memory`): available = total x util - weights - activation peak -
    # non-torch. A row whose printed terms do not add up at its util has a wrong condition.
    assert log.total_gib and log.weights_gib and log.activation_gib and log.non_torch_gib
    assert log.kv_gib is not None
    requested = log.total_gib * log.util
    rest = requested - log.weights_gib - log.activation_gib - log.non_torch_gib
    assert abs(rest - log.kv_gib) < 0.05, (rest, log.kv_gib)


def test_llmd_h100_terms_one_by_one() -> None:
    # vLLM 0.11 on an H100 printed every term (llm-d-benchmark): pdctl's sampler, non-torch
    # and weights estimates, term by term, within 0.1 GiB.
    for log in (
        x for x in E2E if "(llm-d)" in x.name and x.tp == 1 and x.fits and "Mistral" not in x.name
    ):
        p = predict(log)
        assert abs(p.activation_gib - log.activation_gib) < 0.1, log.name
        assert abs(p.non_torch_gib - log.non_torch_gib) < 0.05, log.name
        assert abs(p.weights_gib - log.weights_gib) / log.weights_gib < 0.02, log.name
