"""Phase 3 throughput and P:D with co-located decode instances: they time-slice the GPU
(tests/fixtures/gpu/vllm023-h200/README.md: N vLLM engines at batch B give 0.94x of ONE at B per
GPU), so a slice's tokens/s is 0.94/N of the same instance alone, never more per GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdctl.capacity.fit import Shape
from pdctl.capacity.gpus import find_gpu
from pdctl.capacity.params import model_config
from pdctl.capacity.roofline import decode_step
from tests.capacity.conftest import slices_spec
from tests.helpers import cli, written


def _plan(tmp_path: Path, capsys, per_gpu: int) -> dict:
    path = written(tmp_path / f"p{per_gpu}.yaml", slices_spec(per_gpu))
    out, err = cli(["plan", str(path), "-o", "json"])
    return json.loads(out)


@pytest.mark.parametrize("per_gpu", [2, 4, 5])
def test_a_gpu_of_slices_decodes_no_faster_than_one_instance_at_the_same_batch(
    tmp_path: Path, capsys, per_gpu: int
) -> None:
    data = _plan(tmp_path, capsys, per_gpu)
    dec = data["roles"][1]["decode"]
    alone = decode_step(
        model_config("Qwen/Qwen3-8B"), find_gpu("H200"), Shape(max_model_len=8192, gpu="H200"),
        dec["batch"], dec["context"],
    )
    # each slice runs at 0.94 / N of the same instance alone; the GPU at 0.94x
    assert dec["instancesPerGpu"] == per_gpu
    assert dec["tokensPerSecond"] == pytest.approx(alone.tokens_per_s * 0.94 / per_gpu, rel=0.01)
    assert dec["tokensPerSecondPerGpu"] == pytest.approx(alone.tokens_per_s * 0.94, rel=0.01)
    assert dec["basis"]["timeSlicing"] == ("measured" if per_gpu <= 4 else "assumed")


def test_pd_ratio_counts_the_time_slicing(tmp_path: Path, capsys) -> None:
    """P:D per decode instance: four slices of one GPU together serve no more requests a
    second than 0.94x one instance at their batch (the issue: 2.3x more was counted)."""
    four = _plan(tmp_path, capsys, 4)
    dec = four["roles"][1]["decode"]
    alone = decode_step(
        model_config("Qwen/Qwen3-8B"), find_gpu("H200"), Shape(max_model_len=8192, gpu="H200"),
        dec["batch"], dec["context"],
    )
    gpu_requests_per_s = 4 / four["pd"]["decodeSecondsPerRequest"]
    assert gpu_requests_per_s == pytest.approx(0.94 * alone.tokens_per_s / 256, rel=0.01)
    prefill_s = four["pd"]["prefillSecondsPerRequest"]
    assert four["pd"]["prefillPerDecode"] == pytest.approx(
        prefill_s * 0.94 * alone.tokens_per_s / 256 / 4, rel=0.01
    )


def test_the_table_says_the_slices_time_slice(tmp_path: Path, capsys) -> None:
    path = written(tmp_path / "p4.yaml", slices_spec(4))
    out, _ = cli(["plan", str(path), "-o", "wide"])
    flat = " ".join(out.split())
    assert "decode tokens/s per GPU" in flat
    assert "4 instances time-slice one GPU" in flat
