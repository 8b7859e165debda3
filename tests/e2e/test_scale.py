"""E2E `pdctl scale` on hosts: two replicas of the real vLLM CPU build on lo1 behind vllm-router
(round robin), started by `pdctl up`. `scale serve=1` under a steady stream of completions
through the router takes serve-1 out of the router, drains it and stops it: not one request
fails. `scale serve=2 --dry-run` says what would start; `scale serve=2` starts serve-1 again
and the router sends to both (their vllm:request_success_total)."""

from __future__ import annotations

import json
import re
import threading

import pytest

from tests.e2e.common import complete, down, get, known, routed_spec, up
from tests.targets.testbed import pdctl, write_spec

pytestmark = pytest.mark.e2e
SERVE, ROUTER, METRICS = 18830, 18850, 18851  # the replicas take 18830 and 18831
URL = f"http://127.0.0.1:{ROUTER}/v1"


@pytest.fixture(scope="module")
def scaled(vllm_cpu, ssh_env, tmp_path_factory):
    data = tmp_path_factory.mktemp("scale")
    spec = write_spec(data / "spec.yaml",
                      routed_spec(vllm_cpu, ssh_env, data, "e2escale", (SERVE, ROUTER, METRICS)))
    result = up(spec, ssh_env)
    assert result.returncode == 0, result.stdout + result.stderr
    yield spec
    down(spec, *known(ssh_env))


def successes(port: int) -> float:
    text = get(f"http://127.0.0.1:{port}/metrics")
    counts = re.findall(r"^vllm:request_success_total\{.*\} (\S+)$", text, re.M)
    return sum(float(v) for v in counts)


def running(spec, ssh_env) -> dict[str, str]:
    status = pdctl("status", str(spec), "-o", "json", *known(ssh_env))
    return {r["unit"]: r["state"] for r in json.loads(status.stdout)["instances"]}


def test_scale_down_under_load_fails_no_request(scaled, ssh_env):
    answered, failed, stop = [], [], threading.Event()

    def load() -> None:  # one request after another through the router until scale is done
        while not stop.is_set():
            try:
                answered.append(complete(URL, max_tokens=32)["usage"]["completion_tokens"] > 0)
            except Exception as exc:  # noqa: BLE001 - every failure is counted
                failed.append(repr(exc))

    senders = [threading.Thread(target=load) for _ in range(3)]
    for t in senders:
        t.start()
    try:
        result = pdctl("scale", str(scaled), "serve=1", *known(ssh_env))
    finally:
        stop.set()
        for t in senders:
            t.join()
    print(result.stdout, result.stderr, f"answered {len(answered)}, failed {failed}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "took http://" in result.stdout and "e2escale-serve-1: drained" in result.stdout
    assert failed == [] and len(answered) >= 3, failed  # every request answered
    states = running(scaled, ssh_env)
    assert states["e2escale-serve-1"] == "not started", states  # the spec's, stopped
    assert states["e2escale-serve-0"].startswith("running"), states


def test_scale_up_joins_the_router(scaled, ssh_env):
    dry = pdctl("scale", str(scaled), "serve=2", "--dry-run", *known(ssh_env))
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "would start e2escale-serve-1" in dry.stdout, dry.stdout
    assert running(scaled, ssh_env)["e2escale-serve-1"] == "not started"  # the dry run

    result = pdctl("scale", str(scaled), "serve=2", "-o", "json", "--timeout", "600",
                   *known(ssh_env))
    assert result.returncode == 0, result.stdout + result.stderr
    done = json.loads(result.stdout)
    print(json.dumps(done, indent=2))
    assert done["moves"] == {"start": ["e2escale-serve-1"], "stop": []}, done
    assert done["added"] and done["added"][0].endswith(f":{SERVE + 1}"), done
    before = [successes(SERVE), successes(SERVE + 1)]
    for _ in range(6):
        assert complete(URL)["usage"]["completion_tokens"] == 8
    rose = [successes(SERVE) - before[0], successes(SERVE + 1) - before[1]]
    print("completions per engine after scale serve=2:", rose)
    assert sum(rose) == 6 and min(rose) >= 2, rose
