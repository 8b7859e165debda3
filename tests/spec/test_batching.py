"""Batch limits vLLM refuses to start with (vllm/config/scheduler.py verify_max_model_len):
refused at validation, in one line, when the spec sets both values."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.cli.test_cli_errors import GOOD
from tests.conftest import ROOT
from tests.helpers import cli, written

NIXL = (ROOT / "examples/phase2-nixl-hosts.yaml").read_text()


def _one_line(tmp_path: Path, text: str) -> str:
    spec = written(tmp_path / "spec.yaml", text)
    _, err = cli(["validate", str(spec)], 2)
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {spec}:"), err
    return err


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_batched_tokens_below_num_seqs_is_refused(tmp_path: Path, role: str) -> None:
    doc = yaml.safe_load(NIXL)
    doc[role].update(maxNumSeqs=256, maxNumBatchedTokens=128)
    err = _one_line(tmp_path, yaml.safe_dump(doc, sort_keys=False))
    assert f"{role}.maxNumBatchedTokens: 128 is fewer than {role}.maxNumSeqs (256)" in err, err
    assert "raise it to at least 256" in err, err


def test_serve_batched_tokens_below_num_seqs_names_its_line(tmp_path: Path) -> None:
    err = _one_line(tmp_path, GOOD + "  maxNumSeqs: 64\n  maxNumBatchedTokens: 32\n")
    assert ":13: serve.maxNumBatchedTokens: 32 is fewer than serve.maxNumSeqs (64)" in err, err


@pytest.mark.parametrize(
    "add",
    [
        "  maxNumBatchedTokens: 4096\n  extraArgs: [--disable-chunked-prefill]\n",
        "  maxNumBatchedTokens: 4096\nengine: {extraArgs: [--disable_chunked_prefill]}\n",
        "  maxNumBatchedTokens: 4096\n  extraArgs: [--no-enable-chunked-prefill]\n"
        "engine: {version: 0.23.0}\n",
    ],
)
def test_batched_tokens_below_model_len_without_chunked_prefill(
    tmp_path: Path, add: str
) -> None:
    err = _one_line(tmp_path, GOOD + add)
    assert "serve.maxNumBatchedTokens: 4096 is fewer than model.maxModelLen (8192)" in err, err
    assert "chunked prefill off (--" in err and "or remove --" in err, err


@pytest.mark.parametrize(
    "add",
    [
        "  maxNumSeqs: 128\n  maxNumBatchedTokens: 128\n",  # equal is fine
        "  maxNumBatchedTokens: 4096\n",  # chunked prefill on: shorter than maxModelLen is fine
        "  maxNumBatchedTokens: 8192\n  extraArgs: [--disable-chunked-prefill]\n",
        "  maxNumBatchedTokens: 16\n",  # maxNumSeqs left to the defaults: not this check's
    ],
)
def test_batch_limits_vllm_takes_pass(tmp_path: Path, add: str) -> None:
    cli(["validate", str(written(tmp_path / "spec.yaml", GOOD + add))])
