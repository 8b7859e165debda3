"""E2E `pdctl scale` on hosts: two replicas of the real vLLM CPU build on lo1 behind vllm-router
(round robin), started by `pdctl up`. `scale serve=1` under a steady stream of completions
through the router takes serve-1 out of the router, drains it and stops it: not one request
fails. `scale serve=2 --dry-run` says what would start; `scale serve=2` starts serve-1 again
and the router sends to both (their vllm:request_success_total). `pdctl autoscale --once`
(the same spec with `autoscaling:` on requestRate): no load -> serve-1 drained and removed
while requests flow (sent once the decision is printed), none failing; four clients sending
completions -> serve-1 started and joining the router."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import urllib.request

import pytest

from tests.e2e.common import complete, down, get, known, routed_spec, up
from tests.targets.testbed import pdctl, write_spec

pytestmark = pytest.mark.e2e
SERVE, ROUTER, METRICS = 18830, 18850, 18851  # the replicas take 18830 and 18831
URL = f"http://127.0.0.1:{ROUTER}/v1"


@pytest.fixture(scope="module")
def scaled(vllm_cpu, ssh_env, tmp_path_factory):
    data = tmp_path_factory.mktemp("scale")
    doc = routed_spec(vllm_cpu, ssh_env, data, "e2escale", (SERVE, ROUTER, METRICS))
    spec = write_spec(data / "spec.yaml", doc)
    # requestRate: a rate over the window (the tiny model's engine idles between requests, so
    # the waiting gauge read at one instant says little about the load on this CPU build)
    doc["autoscaling"] = {"serve": {"minReplicas": 1, "maxReplicas": 2, "metric": "requestRate",
                                    "target": 0.2, "scaleUpS": 0, "scaleDownS": 0}}
    write_spec(data / "autoscale.yaml", doc)
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
    assert done["moves"] == {"start": ["e2escale-serve-1"], "stop": [], "restart": []}, done
    assert done["added"] and done["added"][0].endswith(f":{SERVE + 1}"), done
    before = [successes(SERVE), successes(SERVE + 1)]
    for _ in range(6):
        assert complete(URL)["usage"]["completion_tokens"] == 8
    rose = [successes(SERVE) - before[0], successes(SERVE + 1) - before[1]]
    print("completions per engine after scale serve=2:", rose)
    assert sum(rose) == 6 and min(rose) >= 2, rose


def post(max_tokens: int) -> dict:
    """A completion of exactly `max_tokens` (ignore_eos): the engine, not HTTP, holds it."""
    body = {"model": "tiny", "prompt": "Hello", "max_tokens": max_tokens, "ignore_eos": True}
    req = urllib.request.Request(f"{URL}/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


class Load:
    """`clients` threads sending completions through the router until stopped."""

    def __init__(self, clients: int, max_tokens: int):
        self.answered: list[bool] = []
        self.failed: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.send, args=(max_tokens,))
                        for _ in range(clients)]
        for t in self.threads:
            t.start()

    def send(self, max_tokens: int) -> None:
        while not self.stop.is_set():
            try:
                got = post(max_tokens)
                self.answered.append(got["usage"]["completion_tokens"] == max_tokens)
            except Exception as exc:  # noqa: BLE001 - every failure is counted
                self.failed.append(repr(exc))

    def end(self) -> None:
        self.stop.set()
        for t in self.threads:
            if t.is_alive():
                t.join()


def autoscale_once(spec, ssh_env, state, on_line=None) -> tuple[int, list[dict]]:
    """`pdctl autoscale SPEC --once -o json`: its exit code and JSON lines; `on_line` is called
    with each line as it is printed (the load starts between the decision and the apply)."""
    argv = [sys.executable, "-m", "pdctl", "autoscale", str(spec), "--once", "-o", "json",
            "--window", "5", "--state", str(state), "--timeout", "600", *known(ssh_env)]
    log = state.with_suffix(".log")  # stderr (scale's progress) to a file: a pipe would fill
    with log.open("w") as err_file:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err_file, text=True)
        docs = []
        assert proc.stdout is not None
        for text in proc.stdout:
            docs.append(json.loads(text))
            if on_line is not None:
                on_line(docs[-1])
        code = proc.wait(timeout=900)
    err = log.read_text()
    print(err, json.dumps(docs, indent=1))
    assert code == 0, err
    return code, docs


def test_autoscale_removes_an_idle_replica_then_adds_one_under_load(scaled, ssh_env):
    spec, state = scaled.parent / "autoscale.yaml", scaled.parent / "autoscale-state.json"
    assert running(scaled, ssh_env)["e2escale-serve-1"].startswith("running")  # scale serve=2
    load: list[Load] = []

    def after_decision(doc: dict) -> None:  # decided on no load: requests flow while it drains
        if doc.get("action") == "down" and not load:
            load.append(Load(2, 32))

    try:
        _, docs = autoscale_once(spec, ssh_env, state, after_decision)
    finally:
        for lo in load:
            lo.end()
    decided, applied = docs[0], docs[-1]
    assert decided["action"] == "down" and decided["current"] == 2 and decided["desired"] == 1
    assert "requestRate 0/instance vs target 0.2: under by 100%" in decided["reason"], decided
    assert applied["stopped"] == ["e2escale-serve-1"], applied
    assert "drained" in applied["drained"]["e2escale-serve-1"], applied
    assert load and load[0].failed == [] and len(load[0].answered) >= 1, load[0].failed
    assert running(scaled, ssh_env)["e2escale-serve-1"] == "not started"

    busy = Load(4, 160)
    try:  # decided: the load ends, and the new engine starts on a CPU the load no longer takes
        _, docs = autoscale_once(spec, ssh_env, state, lambda doc: busy.end())
    finally:
        busy.end()
    decided, applied = docs[0], docs[-1]
    assert decided["action"] == "up" and decided["desired"] == 2, decided
    assert decided["observed"]["request_rate"] > 0.2, decided
    assert applied["started"] == ["e2escale-serve-1"], applied
    assert len(applied["added"]) == 1 and applied["added"][0].endswith(f":{SERVE + 1}"), applied
    assert busy.failed == [], busy.failed
    before = successes(SERVE + 1)
    for _ in range(4):
        complete(URL)
    assert successes(SERVE + 1) - before >= 1  # round robin: the new replica takes its share
