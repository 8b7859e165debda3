"""E2E offline: a host with no route to any package index (node1, a network namespace of
tests/services.sh) gets vllm-router from `pdctl bundle`'s wheels. `pdctl bundle` resolves the
router's closure against the index this machine has; `up --bundle` copies the wheels over SSH,
the router's start script makes a fresh venv and installs with `pip install --no-index
--find-links` only; a completion is answered through the router by the real vLLM CPU build.
The engine's own environment is the prepared CPU build (the CPU build is no PyPI wheel; a
CUDA host's vLLM comes from the bundle the same way: tests/offline/test_bundle.py renders it).
The model is a Hub id that exists nowhere: the engines can only start from the tiny model's
folder that `pdctl bundle --weights` carries and `up --bundle` copies to the host. So is the
LoRA adapter's repository: a real adapter (tests/e2e/make_lora.py) in a Hugging Face cache made
here, carried by `--adapters` and answered by name through the router."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
import uuid
from pathlib import Path

import pytest

from pdctl.offline import manifest as mf
from tests.e2e.common import PROMPT, complete, down, host, model_section, phase0_spec, printed_urls
from tests.e2e.test_lora import make_adapters
from tests.helpers import known
from tests.targets.testbed import pdctl, write_spec

pytestmark = pytest.mark.e2e
SERVE, ROUTER, METRICS = 18820, 18830, 18831  # the replicas take 18820 and 18821
ROUTER_PIP = "vllm-router==0.1.17"
HUB_ID = "pdctl-test/tiny-offline"  # no such model anywhere: only the bundle's copy serves
LORA_ID = "pdctl-test/lora-offline"  # nor this adapter: only the bundle's copy loads
REVISION = uuid.uuid4().hex + "0" * 8  # the adapter's folder on the host is this run's own


def offline_pip(*args: str) -> subprocess.CompletedProcess[str]:
    """pip in node1's network namespace (the test host's only way out is its veth)."""
    cmd = ["ip", "netns", "exec", "pdctl-n1", "/usr/bin/python3", "-m", "pip", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def offline(vllm_cpu, ssh_env, tmp_path_factory):
    data = tmp_path_factory.mktemp("offline")
    hub = data / "hub"
    make_adapters(vllm_cpu, (hub / f"models--{LORA_ID.replace('/', '--')}" / "snapshots" /
                             REVISION, 11))
    lora = {"maxLoraRank": 8, "adapters": [{"name": "sql", "hf": LORA_ID, "revision": REVISION,
                                            "rank": 8}]}
    probe = offline_pip("download", "--no-deps", "-d", str(data / "probe"), ROUTER_PIP)
    assert probe.returncode != 0, "node1 reaches a package index: not an offline host"
    spec = write_spec(data / "spec.yaml", phase0_spec(
        vllm_cpu, "e2eoffl", SERVE, [{**host(ssh_env, vllm_cpu, data, "node1"), "instances": 2}],
        replicas=2,  # a router needs two replicas or more (the plan refuses one)
        model={**model_section(vllm_cpu, name=HUB_ID), "lora": lora},
        router={"port": ROUTER, "metricsPort": METRICS, "venv": str(data / "router-venv"),
                "listen": "10.77.1.2"},  # reached from this namespace over node1's veth
    ))
    folder = data / "bundle"
    made = pdctl("bundle", str(spec), "-o", str(folder), "--python", "3.11",
                 "--platform", "manylinux_2_28_x86_64", "--weights", str(vllm_cpu.model),
                 "--adapters", env={"HF_HUB_CACHE": str(hub)}, timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    print(made.stdout)
    result = pdctl("up", str(spec), "--bundle", str(folder), "--yes", "--timeout", "600",
                   *known(ssh_env), timeout=900)
    yield data, spec, folder, result
    down(spec, *known(ssh_env))
    shutil.rmtree(Path.home() / ".cache" / "pdctl-adapters" / f"sql_{REVISION}",
                  ignore_errors=True)  # node1 shares this filesystem (and root's home)


def test_the_bundle_holds_the_routers_closure_pinned_by_sha256(offline):
    _, _, folder, _ = offline
    manifest = mf.verify(folder)
    names = [e.path for e in manifest.files]
    assert any(n.startswith("wheels/vllm_router-0.1.17-") for n in names), names
    assert manifest.needs == (("e2eoffl-router", (ROUTER_PIP,)),)
    assert "weights/config.json" in names and any(n.endswith(".safetensors") for n in names)
    assert f"adapters/sql_{REVISION}/adapter_config.json" in names, names
    print(f"bundle: {len(names)} files, {manifest.total() / 1e6:.1f} MB")


def test_the_offline_host_installs_from_the_bundle_and_answers(offline):
    data, spec, _, result = offline
    assert result.returncode == 0, result.stdout + result.stderr
    print(result.stdout)
    start = (data / "node1" / "e2eoffl" / "e2eoffl-router" / "start.sh").read_text()
    assert "pip install --no-index --find-links" in start, start
    venv = data / "router-venv"
    show = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "show", "vllm-router"],
                          capture_output=True, text=True)
    assert "Version: 0.1.17" in show.stdout, show.stdout + show.stderr
    weights = data / "node1" / ".pdctl-bundles" / "e2eoffl" / "weights"  # beside the deployment
    assert (weights / "config.json").is_file(), result.stdout  # the engines' model folder
    engine = (data / "node1" / "e2eoffl" / "e2eoffl-serve-0" / "start.sh").read_text()
    assert "vllm serve ../../.pdctl-bundles/e2eoffl/weights " in engine, engine
    assert HUB_ID not in engine, engine
    urls = printed_urls(result.stdout)
    assert urls == [f"http://10.77.1.2:{ROUTER}/v1"], result.stdout
    assert complete(urls[0])["usage"]["completion_tokens"] == 8
    assert f"LoRA adapter {LORA_ID}" in engine and "fetches nothing" in engine, engine
    body = json.dumps({"model": "sql", "prompt": PROMPT, "max_tokens": 8}).encode()
    ask = urllib.request.Request(f"{urls[0]}/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(ask, timeout=120) as resp:
        answer = json.loads(resp.read())
    assert (answer["model"], answer["usage"]["completion_tokens"]) == ("sql", 8), answer


def test_status_and_diff_given_the_bundle_see_what_up_started(ssh_env, offline):
    _, spec, folder, _ = offline
    status = pdctl("status", str(spec), "--bundle", str(folder), "-o", "json", *known(ssh_env))
    assert status.returncode == 0, status.stdout + status.stderr
    rows = json.loads(status.stdout)["instances"]
    assert sorted((r["unit"], r["state"]) for r in rows) == [
        ("e2eoffl-router", "running"), ("e2eoffl-serve-0", "running"),
        ("e2eoffl-serve-1", "running")], rows
    same = pdctl("diff", str(spec), "--bundle", str(folder), *known(ssh_env))
    assert same.returncode == 0 and same.stdout.endswith("no changes\n"), same.stdout
