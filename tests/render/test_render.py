"""Rendered artifacts of every example: strict Kubernetes validation, shell checks, purity."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from pdctl.render import render
from tests.conftest import EXAMPLES, K8S_VERSION, check_scripts
from tests.helpers import plan_of

# Phase 2/3 examples: tests/render/test_examples.py renders each twice (deterministic) and
# checks its scripts and objects (a stricter Kubernetes check) at every target it supports.
BASIC = [e for e in EXAMPLES if not e.stem.startswith(("phase2-", "phase3-"))]
CORE = ("v1", "apps/", "batch/", "policy/", "networking.k8s.io")


@pytest.mark.parametrize("example", BASIC, ids=lambda p: p.stem)
def test_artifacts_are_deterministic_and_pass_their_checks(example: Path, tmp_path: Path) -> None:
    bundle = render(plan_of(example))
    assert bundle.stream() == render(plan_of(example)).stream()
    if bundle.kind == "kubernetes":
        docs = [d for d in yaml.safe_load_all(bundle.stream()) if d is not None]
        assert docs
        for doc in docs:
            if doc["apiVersion"].startswith(CORE):
                kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    else:
        scripts = {a.path: a.text for a in bundle if a.path.endswith(".sh")}
        assert scripts
        check_scripts(scripts, tmp_path)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_artifacts_start_with_a_header(example: Path) -> None:
    for artifact in render(plan_of(example)):
        if artifact.path.endswith((".sh", ".yaml")):
            assert "Rendered by pdctl" in artifact.text.split("\n", 4)[1] + artifact.text[:200]
            assert "from spec" in artifact.text[:300]


def test_phase1_objects_and_order() -> None:
    bundle = render(plan_of(Path("examples/phase1-k8s.yaml")))
    docs = list(yaml.safe_load_all(bundle.stream()))
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Namespace", "PersistentVolumeClaim", "Service", "Deployment"]
    dep = docs[-1]
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == "vllm/vllm-openai:v0.33.0"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert isinstance(c["resources"]["limits"]["nvidia.com/gpu"], str)
    assert c["startupProbe"]["httpGet"]["path"] == "/health"
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 600
    token = {"secretKeyRef": {"name": "llama3-8b-hf-token", "key": "token"}}
    assert c["env"][0] == {"name": "HF_TOKEN", "valueFrom": token}
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"]["medium"] == "Memory"
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "pdctl"
    assert set(dep["spec"]["selector"]["matchLabels"].items()) <= set(labels.items())
    assert docs[2]["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]


def test_phase0_conda_script_content() -> None:
    bundle = render(plan_of(Path("examples/phase0-conda.yaml")))
    per_unit = ["start.sh", "stop.sh", "{s}", "backoff.conf", "serve.sh", "halt.sh"]
    unit = "llama3-8b-serve-{i}"
    assert bundle.paths() == [
        f"hosts/gpu-a/{unit.format(i=i)}/"
        + name.format(s=f"pdctl-llama3-8b-{unit.format(i=i)}.service")
        for i in (0, 1)
        for name in per_unit
    ]
    start0 = bundle["hosts/gpu-a/llama3-8b-serve-0/start.sh"]
    start1 = bundle["hosts/gpu-a/llama3-8b-serve-1/start.sh"]
    assert "export CUDA_VISIBLE_DEVICES=0,1" in start0
    assert "export CUDA_VISIBLE_DEVICES=2,3" in start1
    assert "--port 8000 " in start0 and "--port 8001 " in start1
    assert "conda create -n pdctl-vllm-0.33.0 python=3.11 -y" in start0
    assert "python -m pip install vllm==0.33.0" in start0
    assert "setsid vllm serve meta-llama/Llama-3.1-8B-Instruct" in start0
    assert "--gpu-memory-utilization 0.9" in start0
    assert 'kill -TERM -- "-$pid"' in bundle["hosts/gpu-a/llama3-8b-serve-0/stop.sh"]


def test_phase0_docker_script_content() -> None:
    bundle = render(plan_of(Path("examples/phase0-docker.yaml")))
    start = bundle["hosts/gpu-a/qwen-docker-serve-1/start.sh"]
    assert "--gpus '\"device=1\"'" in start
    assert "-p 8001:8000" in start
    assert "--ipc=host" in start
    assert "--env HF_TOKEN \\" in start
    assert "vllm/vllm-openai:v0.33.0" in start
    assert "--port 8000" in start  # inside the container
    assert "--label pdctl.io/deployment=qwen-docker" in start


def test_render_at_another_phase() -> None:
    # Its replicas need a cache each pod can mount (a ReadWriteOnce PVC is refused).
    text = Path("examples/phase0-conda.yaml").read_text()
    bundle = render(plan_of(text + "kubernetes: {storage: {type: emptyDir}}\n", "x", phase=1))
    assert bundle.kind == "kubernetes"
    kinds = [d["kind"] for d in yaml.safe_load_all(bundle.stream())]
    assert "Deployment" in kinds


def test_values_reaching_the_shell_are_quoted(tmp_path: Path) -> None:
    text = """
name: evil
model: {name: "/models/it's; rm -rf $HOME", servedName: "a b`id`"}
engine: {env: {WEIRD: "$(reboot) 'x' \\"y\\""}, extraArgs: [--max-num-seqs, "1; reboot"]}
hosts: [{name: h, address: 10.0.0.1, gpus: [0], dataDir: "/data/x y", runtime: conda}]
serve: {}
"""
    bundle = render(plan_of(text, "evil.yaml"))
    scripts = {a.path: a.text for a in bundle}
    check_scripts(scripts, tmp_path)
    start = bundle["hosts/h/evil-serve-0/start.sh"]
    assert "'/models/it'\"'\"'s; rm -rf $HOME'" in start
    assert "export WEIRD='$(reboot) '\"'\"'x'\"'\"' \"y\"'" in start
    assert "deploy_dir='/data/x y/evil'" in start
