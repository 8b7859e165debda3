"""What each figure of `plan` is of: an instance of TP x PP x DP GPUs, experts spread by EP,
KV per DP rank; no P:D ratio where one instance both prefills and decodes (phases 0/1)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.capacity.conftest import serve_spec
from tests.helpers import cli, written
from tests.helpers import run_cli as run

EP = serve_spec("Qwen/Qwen3-30B-A3B", gpus=4, head="hardware: {gpu: H100}\n",
                serve="replicas: 1, tensorParallel: 1, dataParallel: 4, expertParallel: true")


def _flat(text: str) -> str:
    return " ".join(re.sub(r"[│┃┏┓┗┛┡┩└┘━─┳┻╇╈┼┴┬]", " ", text).split())


def _plan(tmp_path: Path, capsys, text: str) -> tuple[str, dict]:
    path = written(tmp_path / "s.yaml", text)
    out, err = cli(["plan", str(path), "-o", "wide"])
    jcode, jout, _ = run(["plan", str(path), "-o", "json"], capsys)
    assert jcode == 0
    return _flat(out), json.loads(jout)


def test_dp_and_ep_are_named(tmp_path: Path, capsys) -> None:
    out, data = _plan(tmp_path, capsys, EP)
    assert "GPUs per instance 4 (TP 1, PP 1, DP 4; experts over EP 4)" in out
    assert "expert params x bytes/param / EP" in out
    assert "params x bytes/param / TP (heaviest PP stage)" not in out
    role = data["roles"][0]
    assert (role["dataParallel"], role["expertParallel"]) == (4, 4)
    tokens = role["kvTokens"]
    assert f"KV cache size (vLLM's count) per DP rank {tokens:,} tokens" in out
    assert f"KV cache size per instance {tokens * 4:,} tokens" in out
    assert role["kvTokensPerInstance"] == 4 * tokens
    assert "TP 1 x DP 4 (EP 4) at util" in out  # not "TP 1": the instance is 4 GPUs
    dec = role["decode"]
    # four ranks decode their own batches: per GPU is a quarter of the instance
    assert dec["tokensPerSecondPerGpu"] * 4 == pytest.approx(dec["tokensPerSecond"], rel=0.01)


def test_phase0_prints_no_pd_ratio(tmp_path: Path, capsys) -> None:
    out, data = _plan(tmp_path, capsys, EP)
    assert "P:D" not in out and "prefill instances per decode instance" not in out
    assert data["pd"]["prefillPerDecode"] is None and data["pd"]["prefillInstances"] is None
