"""`pdctl status`'s count on Kubernetes tells the truth when a workload has fewer pods than it
wants (a quota or admission webhook stopped its ReplicaSet; an LWS with no group ready): each
missing replica is a unit that is not up, never "0 of 0 units up". Exit status as on hosts:
0 when the state could be read. On kmock (no controller: the tests write the pods)."""

from __future__ import annotations

import json

import yaml
from kubernetes import client

from pdctl.cli.summary import status_counts, status_line
from pdctl.targets.kube.status import status_rows
from pdctl.targets.kube.target import KubeTarget
from tests.targets.kube.test_status_reasons import put_pod
from tests.targets.kube.test_target import phase1, write_kube_files
from tests.targets.testbed import pdctl

NS = "vllm-inference"
READY = {
    "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "vllm", "image": "vllm"}]},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
}


def spec_with(tmp_path, url: str, name: str, replicas: int):
    spec, kubeconfig = write_kube_files(url, tmp_path, name)
    data = yaml.safe_load(spec.read_text())
    data["serve"]["replicas"] = replicas
    spec.write_text(yaml.safe_dump(data))
    return spec, kubeconfig


def test_a_deployment_without_pods_counts_its_replicas_as_not_up(cluster, tmp_path):
    tgt = KubeTarget(client.ApiClient(client.Configuration(host=cluster.url)), "kquota", NS)
    _, objs = phase1("kquota", replicas=2)
    tgt.apply_objects(objs)  # no pod: as if a ResourceQuota refused the ReplicaSet's pods
    try:
        spec, kubeconfig = spec_with(tmp_path, cluster.url, "kquota", 2)
        kc = ("--kubeconfig", str(kubeconfig))
        out = pdctl("status", str(spec), "-o", "json", *kc)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["summary"] == {"units": 2, "up": 0, "roles": {"serve": 2}}
        table = pdctl("status", str(spec), *kc)
        assert table.returncode == 0, table.stderr
        assert "0 of 2 units up (2 serve)" in table.stdout, table.stdout
        put_pod(tgt, READY, "kquota-serve-5d9c-a")  # one replica got its pod, and is ready
        table = pdctl("status", str(spec), *kc)
        assert "1 of 2 units up (2 serve)" in table.stdout, table.stdout
    finally:
        tgt._call("DELETE", f"/api/v1/namespaces/{NS}/pods/kquota-serve-5d9c-a")
        tgt.delete_objects(volumes=True)


def lws(replicas: int, ready: int) -> dict:
    return {
        "metadata": {"name": "big-serve", "generation": 1, "labels": {}},
        "spec": {"replicas": replicas},
        "status": {"observedGeneration": 1, "replicas": replicas, "readyReplicas": ready},
    }


def pod(name: str, ready: bool) -> dict:
    labels = {"app.kubernetes.io/component": "serve"}
    cond = {"type": "Ready", "status": "True" if ready else "False"}
    return {"metadata": {"name": name, "labels": labels}, "status": {"conditions": [cond]}}


def test_a_leader_worker_set_counts_each_group_without_pods():
    set_ = lws(1, 0)
    set_["metadata"]["labels"] = {"app.kubernetes.io/component": "serve"}
    rows = [r.__dict__ for r in status_rows([], [], leader_worker_sets=[set_])]
    assert status_line(rows) == "0 of 1 unit up (1 serve)"
    two = lws(2, 1)
    two["metadata"]["labels"] = {"app.kubernetes.io/component": "serve"}
    pods = [pod("big-serve-0", True), pod("big-serve-0-1", True)]  # group 0: leader, worker
    rows = [r.__dict__ for r in status_rows([], pods, leader_worker_sets=[two])]
    assert status_counts(rows) == {"units": 3, "up": 2, "roles": {"serve": 3}}


def test_hosts_rows_count_as_before():
    rows = [
        {"role": "serve", "health": "healthy", "state": "running"},
        {"role": "serve", "health": "-", "state": "stopped"},
    ]
    assert status_line(rows) == "1 of 2 units up (2 serve)"
