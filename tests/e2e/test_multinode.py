"""E2E: one real vLLM instance (CPU build) as a multi-node group over two SSH hosts, data
parallel 2 (one rank per host; `--headless --data-parallel-start-rank 1` on the second),
started by `pdctl up`, answering completions through the leader, `down` leaving nothing.

The hosts are the loopback test hosts lo1 (127.0.0.1) and lo2 (127.0.0.2): the group's nodes
must reach each other on the rendezvous port, and the network-namespace hosts of
tests/services.sh have no route between them (each namespace only reaches the root one).
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.common import (
    ENGINE_ENV,
    assert_nothing_left,
    complete,
    host,
    known,
    model_section,
    printed_urls,
    up,
)
from tests.targets.testbed import pdctl, write_spec

pytestmark = pytest.mark.e2e
PORT = 18760
RPC_PORT = 18761


@pytest.fixture(scope="module")
def group(vllm_cpu, ssh_env, tmp_path_factory):
    if not {"lo1", "lo2"} <= {h.name for h in ssh_env.hosts}:
        pytest.skip("needs the loopback test hosts lo1 and lo2")
    data = tmp_path_factory.mktemp("multinode")
    spec = write_spec(
        data / "spec.yaml",
        {
            "name": "e2emn",
            "phase": 0,
            "model": model_section(vllm_cpu),
            "engine": {"device": "cpu", "env": {**ENGINE_ENV, "VLLM_CPU_OMP_THREADS_BIND": "0"}},
            "hosts": [host(ssh_env, vllm_cpu, data, n) for n in ("lo1", "lo2")],
            "serve": {
                "port": PORT,
                "enforceEager": True,
                "dataParallel": 2,
                "nodes": 2,
                "rendezvousPort": RPC_PORT,
            },
        },
    )
    result = up(spec, ssh_env)
    yield spec, data, result
    pdctl("down", str(spec), *known(ssh_env))


def test_the_group_answers_completions_through_its_leader(group):
    spec, data, result = group
    assert result.returncode == 0, result.stdout + result.stderr
    assert "e2emn-serve-0 on lo1: healthy" in result.stdout
    assert "e2emn-serve-0-node1 on lo2: running" in result.stdout
    urls = printed_urls(result.stdout)
    assert urls == [f"http://127.0.0.1:{PORT}/v1"], result.stdout
    for _ in range(2):
        answer = complete(urls[0])
        assert answer["usage"]["completion_tokens"] == 8
        # vLLM names the data-parallel size in the fingerprint (both ranks joined).
        assert "-dp2-" in answer["system_fingerprint"], answer["system_fingerprint"]


def test_status_and_logs_show_both_nodes(group, ssh_env):
    spec, data, result = group
    status = pdctl("status", str(spec), "-o", "json", *known(ssh_env))
    assert status.returncode == 0, status.stderr
    rows = {r["unit"]: r for r in json.loads(status.stdout)["instances"]}
    assert rows["e2emn-serve-0"]["health"] == "healthy"
    assert rows["e2emn-serve-0-node1"]["host"] == "lo2"
    assert rows["e2emn-serve-0-node1"]["pid"].isdigit()
    logs = pdctl("logs", str(spec), "e2emn-serve-0-node1", *known(ssh_env))
    assert "EngineCore_DP1" in logs.stdout, logs.stdout[-2000:]


def test_down_leaves_nothing(group, ssh_env):
    spec, data, result = group
    down = pdctl("down", str(spec), *known(ssh_env))
    assert down.returncode == 0, down.stdout + down.stderr
    for name in ("lo1", "lo2"):
        assert_nothing_left(data / name, [PORT, RPC_PORT])
