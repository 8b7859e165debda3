"""Batch limits vLLM itself refuses to start with, checked where the spec sets both values.

vLLM's SchedulerConfig.verify_max_model_len (vllm/config/scheduler.py, 0.2x): the engine exits
when max_num_batched_tokens < max_num_seqs, and, with chunked prefill off, when
max_num_batched_tokens < max_model_len. Only values written in the spec are compared: the
defaults pdctl or vLLM pick are checked elsewhere."""

from __future__ import annotations

from typing import Any

from pdctl.errors import SpecError

# The flags that turn chunked prefill off: vLLM 0.23.0's, and 0.33.0's.
NO_CHUNKED_PREFILL = ("--no-enable-chunked-prefill", "--disable-chunked-prefill")
BATCHED_TOKENS = (
    "`--max-num-batched-tokens`. At least `maxNumSeqs`, and at least `model.maxModelLen` when "
    "chunked prefill is off (`--disable-chunked-prefill`; `--no-enable-chunked-prefill` "
    "before 0.33): vLLM refuses to start otherwise."
)


def chunked_prefill_off(*extra_args: tuple[str, ...]) -> str | None:
    """The argument among these `vllm serve` arguments that turns chunked prefill off (vLLM
    takes '_' or '-' in a flag's name), or None."""
    return next(
        (a for args in extra_args for a in args if a.replace("_", "-") in NO_CHUNKED_PREFILL),
        None,
    )


def check_batching(role: str, shape: Any, max_model_len: int | None, engine_args: tuple[str, ...]
                   ) -> None:
    """Refuse `<role>.maxNumBatchedTokens` below the role's maxNumSeqs, or below
    model.maxModelLen with chunked prefill off."""
    tokens, seqs = shape.max_num_batched_tokens, shape.max_num_seqs
    if tokens is None:
        return
    path = f"{role}.maxNumBatchedTokens"
    if seqs is not None and tokens < seqs:
        raise SpecError(
            f"{tokens} is fewer than {role}.maxNumSeqs ({seqs}): vLLM refuses to start when "
            "max_num_batched_tokens < max_num_seqs",
            path=path, fix=f"raise it to at least {seqs}, or lower {role}.maxNumSeqs",
        )
    off = chunked_prefill_off(shape.extra_args, engine_args)
    if max_model_len is not None and tokens < max_model_len and off:
        raise SpecError(
            f"{tokens} is fewer than model.maxModelLen ({max_model_len}) with chunked prefill "
            f"off ({off}): vLLM refuses to start, as it would reject sequences longer than "
            f"{tokens} tokens",
            path=path,
            fix=f"raise it to at least {max_model_len}, lower model.maxModelLen, or remove "
            f"{off}",
        )
