"""E2E phase 0 front door: two replicas of the real vLLM CPU build on lo1 behind vllm-router
in plain mode (round robin), all started by `pdctl up`. `up` prints the router as the one
address; completions spread over both engines (their vllm:request_success_total); with one
engine killed (-9) the router still answers every request (its retries, then its health
checks drop the dead engine)."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

from tests.e2e.common import complete, down, get, known, printed_urls, routed_spec, up
from tests.targets.testbed import pdctl, write_spec

pytestmark = pytest.mark.e2e
SERVE, ROUTER, METRICS = 18760, 18770, 18771  # the replicas take 18760 and 18761


@pytest.fixture(scope="module")
def door(vllm_cpu, ssh_env, tmp_path_factory):
    data = tmp_path_factory.mktemp("door")
    spec = write_spec(data / "spec.yaml",
                      routed_spec(vllm_cpu, ssh_env, data, "e2edoor", (SERVE, ROUTER, METRICS)))
    result = up(spec, ssh_env)
    yield spec, result
    down(spec, *known(ssh_env))


def successes(port: int) -> float:
    text = get(f"http://127.0.0.1:{port}/metrics")
    counts = re.findall(r"^vllm:request_success_total\{.*\} (\S+)$", text, re.M)
    return sum(float(v) for v in counts)


def test_up_prints_the_router_and_requests_spread_over_both(door):
    spec, result = door
    assert result.returncode == 0, result.stdout + result.stderr
    print(result.stdout)
    assert printed_urls(result.stdout) == [f"http://127.0.0.1:{ROUTER}/v1"], result.stdout
    before = [successes(SERVE), successes(SERVE + 1)]
    for _ in range(8):
        assert complete(printed_urls(result.stdout)[0])["usage"]["completion_tokens"] == 8
    rose = [successes(SERVE) - before[0], successes(SERVE + 1) - before[1]]
    print("completions per engine:", rose)
    assert sum(rose) == 8 and min(rose) >= 2, rose


def test_one_engine_killed_the_router_still_answers(door, ssh_env):
    spec, result = door
    status = pdctl("status", str(spec), "-o", "json", *known(ssh_env))
    rows = {r["unit"]: r for r in json.loads(status.stdout)["instances"]}
    assert rows["e2edoor-router"]["health"] == "healthy", rows
    os.kill(int(rows["e2edoor-serve-0"]["pid"]), signal.SIGKILL)
    print("killed e2edoor-serve-0, pid", rows["e2edoor-serve-0"]["pid"])
    before = successes(SERVE + 1)
    answers = [complete(f"http://127.0.0.1:{ROUTER}/v1") for _ in range(6)]
    assert [a["usage"]["completion_tokens"] for a in answers] == [8] * 6
    assert successes(SERVE + 1) - before == 6
    print("after the kill: 6 of 6 answered, all by e2edoor-serve-1")
