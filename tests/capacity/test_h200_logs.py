"""pdctl's capacity model against our own vLLM 0.23.0 start-ups on an H200
(tests/capacity/h200_logs.py; raw logs in tests/fixtures/vllm/h200-0.23/).

The fit split was looked at while deriving the 0.23 terms from the source; the held-out
third (chosen by the file name's SHA-256 before any error was seen) was evaluated once, after
the model was frozen (commit "model frozen here before the held-out evaluation"), and is
reported separately in docs/capacity.md. Its assertions are regression guards of what that
evaluation found, not a re-fit.
"""

from __future__ import annotations

import pytest

from pdctl.capacity import model_config
from pdctl.capacity.profile import graphs_counted, v2_runner
from tests.capacity.h200_logs import FIXTURES, H200_LOGS, RUNS, held_out
from tests.capacity.vllm_logs import Log, predict, token_error

FIT = [log for log in H200_LOGS if log.split == "h200-fit"]
HELD = [log for log in H200_LOGS if log.split == "h200-holdout"]


def test_every_run_is_a_kept_log_with_its_figures() -> None:
    assert len(RUNS) == 12
    for run in RUNS:
        text = (FIXTURES / run.file).read_text()
        assert "version 0.23.0" in text and "Available KV cache memory" in text, run.file
    for log in H200_LOGS:
        assert log.version == "0.23.0"
        assert log.kv_gib and log.tokens and log.weights_gib, log.name


def test_the_held_out_third_is_the_hash_rule() -> None:
    # decided before any error was seen: sha256(file name) % 3 == 0
    assert {run.file for run in RUNS if held_out(run.file)} == {
        "phase0-qwen3-8b-u0.9.log", "phase3-hami-n2-decode-0.log", "phase3-hami-n3-decode-0.log",
        "phase3-hami-n4-decode-0.log", "qwen3-30b-a3b-u0.9.log",
    }
    assert (len(FIT), len(HELD)) == (7, 5)


@pytest.mark.parametrize("log", H200_LOGS, ids=lambda x: x.name)
def test_the_runner_vllm_chose_is_the_one_pdctl_models(log: Log) -> None:
    """'Using V2 Model Runner' in the log exactly where pdctl's `v2_runner` says (Qwen3 and
    Mistral dense bf16), and only V1-runner logs print a CUDA-graph estimate."""
    run = next(r for r in RUNS if log.name.startswith(r.file.removesuffix(".log")))
    text = (FIXTURES / run.file).read_text()
    model = model_config(log.model, log.config)
    assert ("Using V2 Model Runner" in text) == v2_runner(model, "0.23.0"), log.name
    assert ("Estimated CUDA graph memory" in text) == graphs_counted("0.23.0", model)


@pytest.mark.parametrize("log", FIT, ids=lambda x: x.name)
def test_fit_split_within_two_percent(log: Log) -> None:
    p = predict(log)
    error = token_error(log, p)
    assert p.fits and error is not None and abs(error) <= 2, error


def test_held_out_split_as_evaluated() -> None:
    # first evaluation (the model frozen before): every case within ±5%, the worst +3.3%
    # (the 1/3 HAMi slice); every verdict right
    errors = {log.name: token_error(log, predict(log)) for log in HELD}
    assert all(e is not None and abs(e) <= 5 for e in errors.values()), errors
    assert all(predict(log).fits for log in HELD)


def test_the_old_sampler_term_would_have_been_low() -> None:
    """The issue's 'nearly all low by ~4%': with the sort's 38.6 bytes a logit (what pdctl
    charged 0.23 before) Qwen3-8B at util 0.9 loses 4.7 GiB of its 109 GiB; the source's 6
    bytes (the V2 runner's dummy sampler) give it back."""
    log = next(x for x in H200_LOGS if x.name.startswith("phase0-qwen3-8b"))
    model = model_config(log.model, log.config)
    old = 1024 * model.vocab * 38.6 / 2**30
    new = 1024 * model.vocab * 6 / 2**30
    assert old - new > 4.5 and abs(predict(log).kv_gib - log.kv_gib) < 1
