"""`pdctl top` on Kubernetes against kmock (an in-memory API server; no kube-apiserver runs on
these machines): pods found by label, each pod's /metrics read through the API server's pod
proxy, dcgm-exporter's metrics when such pods exist, else GPU telemetry named missing. kmock
serves the proxy paths from what the test feeds it (it has no kubelet behind it)."""

from __future__ import annotations

import json
from pathlib import Path

import kmock
import pytest
import yaml
from kubernetes import client

from tests.helpers import written
from tests.targets.conftest import builtin_resources, kube_server
from tests.targets.kubeconfig import write_kubeconfig
from tests.targets.testbed import pdctl

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
NS = "vllm-inference"

DCGM = """# TYPE DCGM_FI_PROF_DRAM_ACTIVE gauge
DCGM_FI_PROF_DRAM_ACTIVE{gpu="0",modelName="NVIDIA H200",Hostname="node-a"} 0.79
# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0",modelName="NVIDIA H200",Hostname="node-a"} 0.03
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="0",modelName="NVIDIA H200",Hostname="node-a"} 0.84
"""


def pod(name: str, namespace: str, labels: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "x"}]},
    }


def setup(srv, tmp_path: Path, dcgm: bool, more: tuple[str, ...] = ()) -> tuple[str, str]:
    api = client.CoreV1Api(client.ApiClient(client.Configuration(host=srv.url)))
    labels = {"app.kubernetes.io/instance": "ktop", "app.kubernetes.io/component": "serve"}
    for name in ("ktop-serve-abc", *more):  # more: pods whose proxy answers nothing
        api.create_namespaced_pod(NS, pod(name, NS, labels))
    api.create_namespaced_pod(
        NS, pod("other-serve-xyz", NS, {**labels, "app.kubernetes.io/instance": "other"})
    )
    base = f"/api/v1/namespaces/{NS}/pods"
    srv.emulator["get", f"{base}/ktop-serve-abc:8000/proxy/metrics"] << kmock.Response(
        status=200, payload=(DATA / "phase0-after.prom").read_bytes()
    )
    if dcgm:
        api.create_namespaced_pod(
            "gpu-operator", pod("dcgm-1", "gpu-operator", {"app": "nvidia-dcgm-exporter"})
        )
        srv.emulator[
            "get", "/api/v1/namespaces/gpu-operator/pods/dcgm-1:9400/proxy/metrics"
        ] << kmock.Response(status=200, payload=DCGM.encode())
    data = yaml.safe_load((ROOT / "examples" / "phase1-k8s.yaml").read_text())
    data["name"] = "ktop"
    spec = written(tmp_path / "spec.yaml", yaml.safe_dump(data))
    kubeconfig = write_kubeconfig(tmp_path, srv.url)
    return str(spec), str(kubeconfig)


@pytest.mark.parametrize("dcgm", [False, True])
def test_top_once_reads_pods_through_the_api_server_proxy(tmp_path, dcgm):
    with kube_server(builtin_resources()) as srv:
        spec, kubeconfig = setup(srv, tmp_path, dcgm)
        res = pdctl(
            "top", spec, "--once", "--window", "1s", "-o", "json", "--kubeconfig", kubeconfig
        )
        proxied = [p for p in srv.paths() if "/proxy/" in p]
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    (inst,) = doc["instances"]  # the other deployment's pod is not ours
    assert (inst["name"], inst["role"], inst["where"], inst["error"]) == (
        "ktop-serve-abc", "serve", "node-a", None,
    )
    assert inst["totals"]["generation_tokens"] == 32.0
    assert f"/api/v1/namespaces/{NS}/pods/ktop-serve-abc:8000/proxy/metrics" in proxied
    if dcgm:
        (g,) = doc["gpus"]
        assert (g["host"], g["source"], g["dram_bw_util"], g["tensor_util"]) == (
            "node-a", "dcgm", 79.0, 3.0,
        )
        assert doc["gpu_missing"] == []
    else:
        assert doc["gpus"] == []
        assert doc["gpu_missing"][0].startswith("dcgm-exporter not found in the cluster")


def test_an_unanswered_pod_is_a_row_with_the_reason_and_exit_1(tmp_path):
    with kube_server(builtin_resources()) as srv:
        spec, kubeconfig = setup(srv, tmp_path, False, ("ktop-serve-def",))
        res = pdctl(
            "top", spec, "--once", "--window", "1s", "-o", "json", "--kubeconfig", kubeconfig
        )
    assert res.returncode == 1
    rows = {i["name"]: i for i in json.loads(res.stdout)["instances"]}
    assert rows["ktop-serve-abc"]["error"] is None
    assert rows["ktop-serve-def"]["error"].startswith("/metrics through the API server")
    assert res.stderr.count("\n") == 1 and "ktop-serve-def" in res.stderr
