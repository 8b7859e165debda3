"""E2E phase 2 on bare metal: one prefill and one decode (real vLLM CPU build, NixlConnector
with kv_buffer_device cpu over UCX on loopback) behind vllm-router in PD mode, all started by
`pdctl up` over SSH. The decode's /metrics must show prompt tokens that came over the
connector (source external_kv_transfer) rather than being computed."""

from __future__ import annotations

import re

import pytest

from tests.e2e.common import (
    PROMPT,
    assert_nothing_left,
    complete,
    down,
    get,
    known,
    pd_spec,
    printed_urls,
    up,
)
from tests.targets.testbed import pdctl, write_spec

pytestmark = pytest.mark.e2e
PREFILL, DECODE, ROUTER, METRICS = 18710, 18720, 18730, 18731
API_KEY = "sk-e2e-pd-key-0f3a"  # secrets.apiKey: engines require it, the router sends it


@pytest.fixture(scope="module")
def pd(vllm_cpu, ssh_env, tmp_path_factory):
    data = tmp_path_factory.mktemp("phase2")
    doc = pd_spec(vllm_cpu, ssh_env, data, "e2epd", (PREFILL, DECODE, ROUTER, METRICS))
    spec = write_spec(data / "spec.yaml", doc)
    result = up(spec, ssh_env, {"PDCTL_E2E_API_KEY": API_KEY})
    yield spec, data, result
    down(spec, *known(ssh_env))


def external_tokens(metrics: str) -> float:
    match = re.search(
        r'^vllm:prompt_tokens_by_source_total\{[^}]*source="external_kv_transfer"[^}]*\} (\S+)$',
        metrics,
        re.M,
    )
    assert match, "no prompt_tokens_by_source_total{source=external_kv_transfer} on decode"
    return float(match.group(1))


def test_completion_through_the_router_uses_transferred_kv(pd):
    spec, data, result = pd
    assert result.returncode == 0, result.stdout + result.stderr
    assert printed_urls(result.stdout) == [f"http://127.0.0.1:{ROUTER}/v1"], result.stdout
    before = external_tokens(get(f"http://127.0.0.1:{DECODE}/metrics"))
    answer = complete(printed_urls(result.stdout)[0], PROMPT, max_tokens=8)
    assert answer["usage"]["completion_tokens"] == 8
    assert "___prefill_addr_" in answer["id"]  # vllm-router's P/D request id
    after = external_tokens(get(f"http://127.0.0.1:{DECODE}/metrics"))
    assert after - before >= 32, (before, after)  # at least one whole KV block came over NIXL


def test_status_lists_prefill_decode_and_router(pd, ssh_env):
    spec, data, result = pd
    import json

    status = pdctl("status", str(spec), "-o", "json", *known(ssh_env))
    rows = {r["role"]: r for r in json.loads(status.stdout)["instances"]}
    assert set(rows) == {"prefill", "decode", "router"}
    assert {r["health"] for r in rows.values()} == {"healthy"}


def test_engines_require_the_api_key(pd):
    """secrets.apiKey reached vLLM: /v1 without the key is refused, with it answered; /health
    stays open (what pdctl's probes and the router's health checks rely on)."""
    import urllib.error
    import urllib.request

    for port in (PREFILL, DECODE):
        with pytest.raises(urllib.error.HTTPError) as refused:
            get(f"http://127.0.0.1:{port}/v1/models")
        assert refused.value.code == 401
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200
        get(f"http://127.0.0.1:{port}/health")


def test_down_stops_all_three(pd, ssh_env):
    spec, data, result = pd
    down = pdctl("down", str(spec), *known(ssh_env))
    assert down.returncode == 0, down.stderr
    lines = [line for line in down.stdout.splitlines() if line.startswith("stopped ")]
    assert lines[0] == "stopped e2epd-router on lo1", down.stdout  # router first
    assert len(lines) == 3
    assert_nothing_left(data / "lo1", [PREFILL, DECODE, ROUTER, METRICS])
