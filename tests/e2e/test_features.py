"""E2E speculative decoding (issue 37): `serve.speculative` through `pdctl up` on the real SSH
host and the vLLM CPU build, one class (one server start, torn down before the next) per method
the CPU build can run here:

- `ngram`: its speculative-decoding counters exist and count drafts after a request whose
  output repeats the prompt's words;
- `draft_model`: the test model as its own draft; the worker logs that it loaded the drafter and
  gave it KV cache (vllm/v1/worker/cpu_model_runner.py), and greedy drafts are accepted
  (vllm:spec_decode_num_accepted_tokens_total > 0).

The CPU platform runs every method (cpu_model_runner.py: "speculative decoding is now supported
on CPU with C++ native impls"); `eagle`/`eagle3` need an EAGLE head and `mtp` a model with MTP
layers, neither of which exists for the test model, so they are not started here.

KV offloading (`engine.kvOffload`) is not run: neither backend works on vLLM's CPU platform
(CPUOffloadingSpec raises 'CPU Offloading is currently only supported on CUDA-alike and XPU
GPUs'; LMCache's connector places its engine on cuda:<rank>), so pdctl refuses it with
engine.device cpu (tests/spec/test_offload_cpu.py); its rendering is tested in
tests/plan/test_features.py and tests/render/test_speculative_render.py."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.common import PROMPT, complete, down, get, host, known, phase0_spec, up
from tests.targets.testbed import pdctl, write_spec

pytestmark = pytest.mark.e2e
NGRAM_PORT = 18810  # no other e2e file uses these
DRAFT_PORT = 18811


def deploy(vllm_cpu, ssh_env, data: Path, port: int, speculative: dict):
    spec = write_spec(data / "spec.yaml", phase0_spec(
        vllm_cpu, "e2espec", port, [host(ssh_env, vllm_cpu, data)], {"speculative": speculative},
    ))
    return spec, up(spec, ssh_env)


def counter(metrics: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.e+]+)$", metrics, re.M)
    return float(m.group(1)) if m else None


def spec_lines(metrics: str) -> list[str]:
    return [line for line in metrics.splitlines() if line.startswith("vllm:spec_decode")]


class TestNgram:
    @pytest.fixture(scope="class")
    def served(self, vllm_cpu, ssh_env, tmp_path_factory):
        data = tmp_path_factory.mktemp("ngram")
        # ngram with 1-token matches: any word the output repeats from its context drafts
        spec, result = deploy(vllm_cpu, ssh_env, data, NGRAM_PORT, {
            "method": "ngram", "numSpeculativeTokens": 2,
            "promptLookupMin": 1, "promptLookupMax": 2,
        })
        yield spec, result
        down(spec, *known(ssh_env))

    def test_ngram_speculation_is_active_in_the_engine(self, served, ssh_env):
        spec, result = served
        assert result.returncode == 0, result.stdout + result.stderr
        # the engine was started with pdctl's --speculative-config and took it
        logs = pdctl("logs", str(spec), *known(ssh_env))
        assert logs.returncode == 0, logs.stderr
        assert "method='ngram'" in logs.stdout, logs.stdout[-3000:]
        answer = complete(f"http://127.0.0.1:{NGRAM_PORT}/v1", PROMPT * 2, max_tokens=32)
        assert answer["usage"]["completion_tokens"] == 32
        metrics = get(f"http://127.0.0.1:{NGRAM_PORT}/metrics")
        drafts = counter(metrics, "vllm:spec_decode_num_drafts_total")
        assert drafts is not None, "no speculative-decoding counters: speculation is off"
        assert drafts > 0, spec_lines(metrics)


def greedy(base_url: str, prompt: str, max_tokens: int) -> dict:
    body = json.dumps({
        "model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
    }).encode()
    req = urllib.request.Request(
        f"{base_url}/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


class TestDraftModel:
    @pytest.fixture(scope="class")
    def served(self, vllm_cpu, ssh_env, tmp_path_factory):
        data = tmp_path_factory.mktemp("draft")
        # the test model drafts for itself: same vocabulary, and greedy drafts are the target's
        spec, result = deploy(vllm_cpu, ssh_env, data, DRAFT_PORT, {
            "method": "draft_model", "model": str(vllm_cpu.model), "numSpeculativeTokens": 3,
        })
        yield spec, result
        down(spec, *known(ssh_env))

    def test_draft_model_is_loaded_and_its_drafts_accepted(self, served, ssh_env):
        spec, result = served
        assert result.returncode == 0, result.stdout + result.stderr
        logs = pdctl("logs", str(spec), *known(ssh_env))
        assert logs.returncode == 0, logs.stderr
        assert "method='draft_model'" in logs.stdout, logs.stdout[-3000:]
        assert "Loading drafter model" in logs.stdout, logs.stdout[-3000:]
        assert "Draft model KV cache initialized for CPU backend" in logs.stdout, (
            logs.stdout[-3000:]
        )
        answer = greedy(f"http://127.0.0.1:{DRAFT_PORT}/v1", PROMPT, max_tokens=24)
        assert answer["usage"]["completion_tokens"] == 24
        assert answer["choices"][0]["text"], answer
        metrics = get(f"http://127.0.0.1:{DRAFT_PORT}/metrics")
        drafts = counter(metrics, "vllm:spec_decode_num_draft_tokens_total")
        accepted = counter(metrics, "vllm:spec_decode_num_accepted_tokens_total")
        assert drafts is not None and accepted is not None, spec_lines(metrics)
        assert drafts > 0 and accepted > 0, spec_lines(metrics)
