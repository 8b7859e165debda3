"""The GPU harness as a test: on a host with an NVIDIA GPU, a vLLM install and an sshd that
lets this user in (tests/gpu/README.md), drive pdctl through every scenario and check what it
saw. Elsewhere (CI, laptops) each test is skipped and says what is missing. The recordings of
the H200 runs are replayed by tests/gpu/test_replay.py on every machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
VENV = Path(os.environ.get("PDCTL_GPU_VENV", "/opt/torch/.venv"))
KEY = Path(os.environ.get("PDCTL_GPU_KEY", "/root/.ssh/pdctl_gpu"))


def missing() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return "no NVIDIA GPU here (nvidia-smi not found)"
    if subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=False).returncode != 0:
        return "nvidia-smi finds no GPU"
    if not (VENV / "bin" / "vllm").exists():
        return f"no vLLM in {VENV} (set PDCTL_GPU_VENV)"
    if not KEY.exists():
        return f"no SSH key {KEY} for the GPU host's sshd (tests/gpu/h200.sh setup makes one)"
    return None


pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")


def drive(scenario: str, out: Path, *args: str) -> dict:
    subprocess.run([sys.executable, str(HERE / "drive.py"), scenario, str(out), *args],
                   check=True, timeout=1800)
    return json.loads((out / scenario / "results.json").read_text())


def test_phase0_serves_and_reports(tmp_path):
    res = drive("phase0", tmp_path, "--batches", "64")
    assert res["up_exit"] == 0, res
    assert res["completion_tokens"] == 16
    assert res["batches"][0]["ok"] == 64


def test_phase2_nixl_moves_kv(tmp_path):
    res = drive("phase2", tmp_path)
    assert res["up_exit"] == 0, res
    before, after = res["external_kv_tokens"]
    assert after - before >= 4 * 200 * 0.9, res["external_kv_tokens"]


def test_phase3_slices_start_and_decode(tmp_path):
    res = drive("phase3", tmp_path, "--per-gpu", "2")
    shape = res["shapes"]["2"]
    assert all(shape["healthy"]), shape
    assert all(u.get("kv_tokens", 0) > 0 for u in shape["units"].values())
