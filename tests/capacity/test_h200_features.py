"""pdctl's capacity model against vLLM 0.23.0 start-ups of issue 37's features on an H200:
an EAGLE-3 head on Qwen3-8B (k=3) and the hybrid Mamba-2 Nemotron-H-8B
(tests/fixtures/vllm/h200-0.23-features/, raw logs and command lines).

The terms were derived from vLLM's source and committed before these runs; the first
comparison below changed nothing in pdctl (docs/capacity.md, "Issue 37's features on the
H200"). Both runs fall in the fit two-thirds of the file-name rule (`held_out`); the held-out
start-ups of the same table (EAGLE-3 k=5, MiMo-7B without MTP) ran on an H100
(tests/capacity/test_h100_features.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pdctl.capacity import model_config
from pdctl.capacity.speculative import Draft, draft_of
from tests.capacity.h200_logs import held_out, log_of, runs
from tests.capacity.vllm_logs import Log, predict, shape, token_error

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "h200-0.23-features"
RUNS = runs(FOLDER)
LOGS: tuple[Log, ...] = tuple(log_of(run, FOLDER) for run in RUNS)


def by_name(prefix: str) -> Log:
    return next(log for log in LOGS if log.name.startswith(prefix))


def test_the_runs_are_kept_logs_of_0_23_with_their_figures() -> None:
    assert [r.file for r in RUNS] == ["qwen3-8b-u0.9-eagle3-k3.log", "nemotron-h-8b-u0.9.log"]
    for run, log in zip(RUNS, LOGS, strict=True):
        text = (FOLDER / run.file).read_text()
        assert "(v0.23.0)" in text and "GPU KV cache size" in text, run.file
        assert log.tokens and log.kv_gib and log.weights_gib
        assert not held_out(run.file)  # both in the fit two-thirds: no held-out claim here


def test_the_logs_ran_what_runs_yaml_says() -> None:
    eagle = (FOLDER / "qwen3-8b-u0.9-eagle3-k3.log").read_text()
    assert "SpeculativeConfig(method='eagle3'" in eagle and "num_spec_tokens=3" in eagle
    nemo = (FOLDER / "nemotron-h-8b-u0.9.log").read_text()
    assert "Updating mamba_ssm_cache_dtype to 'float32'" in nemo
    # the page alignment pdctl computes is the one vLLM logged
    assert "Setting attention block size to 1040 tokens" in nemo


@pytest.mark.parametrize("log", LOGS, ids=lambda x: x.name)
def test_tokens_within_one_percent_on_first_comparison(log: Log) -> None:
    # first comparison, nothing changed after it: EAGLE-3 +0.74%, Nemotron-H +0.46%
    p = predict(log)
    error = token_error(log, p)
    assert p.fits and error is not None and 0 < error <= 1, error


def test_weights_against_the_printed_model_loading() -> None:
    # Nemotron-H's 8.10e9 parameters (one block per pattern letter, relu2 MLP) give its
    # printed 15.11 GiB; the EAGLE-3 engine counts the head's own lm_head (draft vocabulary x
    # hidden x 2 bytes), which dummy loading shares with the target: pdctl is that much high
    nemo, eagle = by_name("nemotron"), by_name("qwen3-8b-u0.9-eagle3")
    assert nemo.weights_gib is not None and eagle.weights_gib is not None
    assert abs(predict(nemo).weights_gib - nemo.weights_gib) < 0.05
    model = model_config(eagle.model, eagle.config)
    s = shape(eagle)
    draft = draft_of(s.speculative, model, 1, "bfloat16", "auto")
    assert isinstance(draft, Draft) and draft.layers == 1 and draft.num_spec == 3
    head = 32000 * model.hidden * 2 / 2**30  # the head's config: draft_vocab_size 32000
    over = predict(eagle).weights_gib - eagle.weights_gib
    assert abs(over - head) < 0.05, (over, head)
