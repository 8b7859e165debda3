"""P2pNcclConnector's decode kv_buffer_size is GPU memory beside vLLM's budget: the plan
leaves room for it and refuses a budget + buffer above the GPU."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pdctl.capacity.memory import beside_util
from pdctl.capacity.report import connector_buffer
from pdctl.cli.specfile import read_spec
from pdctl.plan.kv import GIB, P2P_PRODUCER_BUFFER, p2p_config
from tests.helpers import cli, written

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "phase2-p2p-nccl.yaml"


def _variant(tmp_path: Path, util: str, gpu: bool = False) -> Path:
    text = EXAMPLE.read_text().replace(
        "decode: {replicas: 2, tensorParallel: 1, gpuMemoryUtilization: 0.7}",
        f"decode: {{replicas: 2, tensorParallel: 1, gpuMemoryUtilization: {util}}}",
    )
    if gpu:
        text = text.replace("hosts:\n", "hardware: {gpu: H100-SXM}\nhosts:\n", 1)
    return written(tmp_path / "p2p.yaml", text)


def test_the_buffer_counted_is_the_one_emitted() -> None:
    spec, _ = read_spec(str(EXAMPLE))
    for role in ("prefill", "decode"):
        emitted = p2p_config(
            spec.disaggregation, role, kv_port=1, http_port=2, proxy=("10.0.0.1", 3)
        )["kv_buffer_size"]
        assert connector_buffer(spec, role) == emitted
    assert connector_buffer(spec, "prefill") == P2P_PRODUCER_BUFFER
    assert connector_buffer(spec, "decode") == 8 * GIB  # 10% of gpuMemoryGib 80


def test_the_recommended_decode_util_leaves_room_for_the_buffer() -> None:
    out, _ = cli(["plan", str(EXAMPLE), "-o", "json"])
    doc = json.loads(out)
    decode = next(r for r in doc["roles"] if r["role"] == "decode")
    rec = decode["recommendedGpuMemoryUtilization"]
    total = doc["gpu"]["usableMib"] * 1024**2
    assert rec * total + 8 * GIB <= total
    assert rec == beside_util(total, 8 * GIB, 0.92)
    prefill = next(r for r in doc["roles"] if r["role"] == "prefill")
    assert prefill["recommendedGpuMemoryUtilization"] == 0.92  # 10 bytes change nothing


def test_a_budget_and_buffer_above_the_gpu_does_not_fit(tmp_path: Path) -> None:
    out, _ = cli(["plan", str(_variant(tmp_path, "0.95"))], code=1)
    flat = " ".join(out.split())
    assert re.search(r"fits\s+yes\s+NO", out)
    assert "decode: P2pNcclConnector's kv_buffer_size (8.00 GiB)" in flat
    assert "lower decode.gpuMemoryUtilization to 0.89 or less" in flat
    assert "set disaggregation.gpuMemoryGib to" in flat
    assert "--max-num-seqs" not in flat  # no KV-side "nearest fit" for a buffer problem
    assert "first apply a fix listed above (a nearest fit, or a warning's fix)" in flat


def test_validate_strict_refuses_it_on_a_named_gpu(tmp_path: Path) -> None:
    _, err = cli(["validate", "--strict", str(_variant(tmp_path, "0.95", gpu=True))], code=1)
    assert "kv_buffer_size" in err and "decode.gpuMemoryUtilization" in err
    cli(["validate", "--strict", str(_variant(tmp_path, "0.8", gpu=True))])
