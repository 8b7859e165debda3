"""`engine.kvOffload` with `engine.device: cpu` (issue 37): neither backend runs on vLLM's CPU
platform, so `pdctl validate` and `pdctl up` refuse it with one located line and exit 2
instead of rendering engines that stop at start. Native: vLLM's CPUOffloadingSpec raises
'CPU Offloading is currently only supported on CUDA-alike and XPU GPUs' on any other platform
(vllm/v1/kv_offload/cpu/spec.py, v0.23.0 l.110-114, v0.33.0 l.220-224; the 0.32.0 CPU build
stopped with it when started with --kv-offloading-size). LMCache: its connector places its
engine on cuda:<rank> (lmcache_integration/vllm_v1_adapter.py `_init_lmcache_engine`).
Speculative decoding is supported on the CPU platform and stays accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import cli

HOST = (
    "hosts:\n"
    "  - {name: lo1, address: 127.0.0.1, user: pdctl, runtime: venv, venv: /opt/vllm-cpu}\n"
)


def cpu_spec(engine: str, rest: str) -> str:
    return (
        "name: cpuoff\n"
        f"phase: {2 if 'prefill' in rest else 0}\n"
        "model: {name: Qwen/Qwen3-0.6B, dtype: float32}\n"
        "engine:\n"
        "  version: '0.33.0'\n"
        "  device: cpu\n"
        f"{engine}"
        f"{HOST}{rest}"
    )


SERVE = "serve:\n  enforceEager: true\n"
PD = (
    "prefill: {replicas: 1, enforceEager: true}\n"
    "decode: {replicas: 1, enforceEager: true}\n"
    "disaggregation: {connector: nixl, kvBufferDevice: cpu}\n"
    "router: {venv: /opt/vllm-router}\n"
)
OFFLOAD = "  kvOffload: {sizeGib: 1, backend: BACKEND}\n"


@pytest.mark.parametrize("backend", ["native", "lmcache"])
@pytest.mark.parametrize("rest", [SERVE, PD], ids=["phase0", "phase2-nixl"])
# `up --dry-run --offline`: up's own path up to the plan, without connecting to the host
@pytest.mark.parametrize("command", [["validate"], ["up", "--dry-run", "--offline"]], ids=str)
def test_offload_on_cpu_is_one_located_line_exit_2(
    tmp_path: Path, backend: str, rest: str, command: list[str]
) -> None:
    spec = tmp_path / "s.yaml"
    text = cpu_spec(OFFLOAD.replace("BACKEND", backend), rest)
    spec.write_text(text)
    out, err = cli([*command, str(spec)], 2)
    lines = err.strip().splitlines()
    line_no = text.splitlines().index(OFFLOAD.replace("BACKEND", backend).rstrip()) + 1
    assert len(lines) == 1, err
    assert f"{spec}:{line_no}: engine.kvOffload: " in lines[0], err
    what = "needs CUDA or XPU engines" if backend == "native" else "needs CUDA engines"
    assert what in lines[0] and "remove engine.kvOffload" in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "speculative",
    [
        "{method: ngram, numSpeculativeTokens: 2, promptLookupMin: 1, promptLookupMax: 2}",
        "{method: draft_model, model: Qwen/Qwen3-0.6B, numSpeculativeTokens: 3}",
        "{method: eagle3, model: /models/eagle3-head, numSpeculativeTokens: 3}",
    ],
)
def test_speculative_on_cpu_is_accepted(tmp_path: Path, speculative: str) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(cpu_spec("", SERVE + f"  speculative: {speculative}\n"))
    out, err = cli(["validate", str(spec)], 0)
    assert ": ok: cpuoff" in out, out + err
