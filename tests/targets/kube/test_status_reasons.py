"""`pdctl status` on Kubernetes: rollout state per Deployment, ready/desired, and for each pod
that is not ready the reason in one line, from pods, events and logs put into kmock (which
has no scheduler or kubelet: the tests write what those would)."""

from __future__ import annotations

import copy
import json

import pytest

from pdctl.cli.summary import status_counts, status_line
from pdctl.targets.kube.status import status_rows
from pdctl.targets.kube.target import KubeTarget
from tests.helpers import checked
from tests.targets.kube.examples import kube_target
from tests.targets.kube.test_target import phase1, write_kube_files
from tests.targets.test_stages import BACKOFF, CRASHING, LOADING, UNSCHEDULABLE
from tests.targets.testbed import pdctl

NS = "vllm-inference"


def applied(cluster, name: str, replicas: int = 1, **kw) -> tuple[KubeTarget, list[dict]]:
    """The target of phase 1 deployment `name` on `cluster`, its objects applied."""
    plan, objs = phase1(name, replicas)
    tgt = kube_target(cluster.url, plan, **kw)
    tgt.apply_objects(objs)
    return tgt, objs


def put_pod(tgt: KubeTarget, template: dict, name: str) -> None:
    pod = copy.deepcopy(template)
    pod.update(apiVersion="v1", kind="Pod")
    labels = {"app.kubernetes.io/instance": tgt.name, "app.kubernetes.io/managed-by": "pdctl"}
    labels["app.kubernetes.io/component"] = "serve"
    pod["metadata"] = {"name": name, "namespace": NS, "labels": labels}
    tgt._call("POST", f"/api/v1/namespaces/{NS}/pods", pod)


def test_status_names_why_each_pod_is_not_ready(cluster, tmp_path):
    tgt, _ = applied(cluster, "kwhy")
    put_pod(tgt, UNSCHEDULABLE, "kwhy-serve-a")
    put_pod(tgt, BACKOFF, "kwhy-serve-b")
    put_pod(tgt, CRASHING, "kwhy-serve-c")
    other = copy.deepcopy(UNSCHEDULABLE)
    other.update(apiVersion="v1", kind="Pod")
    # another deployment's pod (kmock ignores the label selector): not shown
    other["metadata"] = {"name": "other-serve-z", "labels": {"app.kubernetes.io/instance": "x"}}
    tgt._call("POST", f"/api/v1/namespaces/{NS}/pods", other)
    log = f"get /api/v1/namespaces/{NS}/pods/kwhy-serve-c/log"
    cluster.emulator[log] << b"INFO loading\nOSError: /models/llama does not exist\n"
    try:
        rows = {r.unit: r for r in tgt.status()}
        assert rows["kwhy-serve"].why == "progressing"
        assert rows["kwhy-serve"].state == "0/1 ready"
        assert rows["kwhy-serve-a"].why.startswith(
            "Pending: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
        )
        assert rows["kwhy-serve-b"].why.startswith("ImagePullBackOff: Back-off pulling image")
        assert rows["kwhy-serve-c"].why == (
            "CrashLoopBackOff: vllm restarted 4 times, last exit code 1; "
            "its log ends: OSError: /models/llama does not exist"
        )
        assert "other-serve-z" not in rows
        spec, kubeconfig = write_kube_files(cluster.url, tmp_path, "kwhy")
        out = pdctl("status", str(spec), "-o", "json", "--kubeconfig", str(kubeconfig))
        doc = json.loads(out.stdout)
        found = {r["unit"]: r["why"] for r in doc["instances"]}
        assert found["kwhy-serve-b"].startswith("ImagePullBackOff"), out.stderr
        # the Deployment's row summarises its pods: 3 pods are the units, not 4 rows
        assert doc["summary"] == {"units": 3, "up": 0, "roles": {"serve": 3},
                                  "upByRole": {"serve": 0}, "degraded": []}, doc["summary"]
        table = pdctl("status", str(spec), "--kubeconfig", str(kubeconfig))
        assert "why" in table.stdout and "Insufficient nvidia.com/gpu" in table.stdout
        assert "0 of 3 units up (serve 0/3)" in table.stdout, table.stdout
    finally:
        for name in ("kwhy-serve-a", "kwhy-serve-b", "kwhy-serve-c", "other-serve-z"):
            tgt._call("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}")
        tgt.delete_objects(volumes=True)


def test_a_failed_rollout_says_why():
    from pdctl.targets.kube.status import rollout_state

    dep = {
        "metadata": {"generation": 2},
        "spec": {"replicas": 2},
        "status": {
            "observedGeneration": 2,
            "conditions": [
                {
                    "type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                    "message": 'ReplicaSet "x-7d9" has timed out progressing.',
                }
            ],
        },
    }
    assert rollout_state(dep) == (
        'failed: ProgressDeadlineExceeded: ReplicaSet "x-7d9" has timed out progressing.'
    )


def test_up_waits_with_each_pods_stage_and_fails_with_the_reason(cluster, tmp_path):
    from pdctl.errors import PdctlError
    from tests.targets.test_stages import LOADING, upto

    seen: list = []
    tgt, objs = applied(cluster, "kwait", stage=seen.append)
    put_pod(tgt, LOADING, "kwait-serve-l")
    put_pod(tgt, UNSCHEDULABLE, "kwait-serve-u")
    cut = upto("Using cache directory")  # the engine is compiling
    cluster.emulator[f"get /api/v1/namespaces/{NS}/pods/kwait-serve-l/log"] << cut.encode()
    try:
        with pytest.raises(PdctlError) as err:
            tgt.wait(objs, timeout=0.2, poll=0.1)
        assert str(err.value).startswith(
            "Deployment/kwait-serve not rolled out after 0 s: kwait-serve-u: Pending: 0/4 nodes "
            "are available: 4 Insufficient nvidia.com/gpu."
        )
        stages = {(s.unit, s.stage, s.line) for s in seen}
        assert (
            "kwait-serve-l",
            "compiling",
            "Using cache directory: /root/.cache/vllm/torch_compile_cache/2b1c3b1a/rank_0_0/"
            "backbone for vLLM's torch.compile",
        ) in stages
        assert any(s[:2] == ("kwait-serve-u", "scheduling") for s in stages)
        assert all(s.timeout == 0.2 for s in seen)
        # the CLI, piped: plain lines per stage change, and the one-line reason on stderr
        spec, kubeconfig = write_kube_files(cluster.url, tmp_path, "kwait")
        up = pdctl("up", str(spec), "--yes", "--timeout", "1", "--kubeconfig", str(kubeconfig))
        assert up.returncode == 1
        assert "kwait-serve-l on -: compiling | Using cache directory:" in up.stdout
        assert "kwait-serve-u on -: scheduling | Pending: 0/4 nodes are available" in up.stdout
        assert "kwait-serve-u: Pending: 0/4 nodes are available" in up.stderr
        assert "\x1b[" not in up.stdout  # no live display when piped
    finally:
        for name in ("kwait-serve-l", "kwait-serve-u"):
            tgt._call("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}")
        tgt.delete_objects(volumes=True)


def test_down_waits_until_the_pods_are_gone(cluster):
    import threading

    from pdctl.errors import PdctlError
    from tests.targets.test_stages import LOADING

    seen: list = []
    tgt, _ = applied(cluster, "kgone", stage=seen.append, down_timeout=0.3)
    put_pod(tgt, LOADING, "kgone-serve-a")  # kmock has no garbage collector: it stays
    with pytest.raises(PdctlError, match=r"pods still run after 0 s: kgone-serve-a;"):
        tgt.down(delete_volumes=True)
    assert {(s.unit, s.stage) for s in seen} == {("kgone-serve-a", "terminating")}
    tgt.down_timeout = 30
    path = f"/api/v1/namespaces/{NS}/pods/kgone-serve-a"
    gc = threading.Timer(0.5, lambda: tgt._call("DELETE", path))  # as the GC would
    gc.start()
    assert tgt.down(delete_volumes=True).removed == []  # the objects were deleted before
    gc.join()
    assert tgt.pods() == []


def test_a_leader_worker_set_has_a_rollout_row():
    lws = serving_lws(2, 1)
    lws["status"]["updatedReplicas"] = 2
    (row,) = status_rows([], [], leader_worker_sets=[lws])
    assert (row.unit, row.kind, row.state, row.why) == (
        "big-serve", "rollout", "1/2 groups ready", "progressing",
    )
    lws["status"]["readyReplicas"] = 2
    (row,) = status_rows([], [], leader_worker_sets=[lws])
    assert (row.health, row.why) == ("healthy", "")


# `pdctl down --timeout SECONDS` on Kubernetes: how long down waits for the deployment's pods
# to be gone after deleting its objects (default 300 s, as before), then names those left,
# exit 1. On kmock, which has no garbage collector: a pod written there stays.
def test_down_waits_for_the_pods_as_long_as_timeout_says(cluster, tmp_path):
    tgt, _ = applied(cluster, "kdt")
    put_pod(tgt, LOADING, "kdt-serve-a")  # stays: nothing deletes it
    try:
        spec, kubeconfig = write_kube_files(cluster.url, tmp_path, "kdt")
        kc = ("--kubeconfig", str(kubeconfig))
        out = checked(pdctl("down", str(spec), "--yes", "--timeout", "1", *kc), 1)
        assert "pods still run after 1 s: kdt-serve-a;" in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert tgt.owned() == [("PersistentVolumeClaim", "kdt-model-cache")]  # kept, as always
        bad = pdctl("down", str(spec), "--yes", "--timeout", "0", *kc)
        assert bad.returncode == 2 and "--timeout" in bad.stderr, bad.stderr
    finally:
        tgt._call("DELETE", f"/api/v1/namespaces/{NS}/pods/kdt-serve-a")
        tgt.delete_objects(volumes=True)


# `pdctl status`'s count on Kubernetes tells the truth when a workload has fewer pods than it
# wants (a quota or admission webhook stopped its ReplicaSet; an LWS with no group ready): each
# missing replica is a unit that is not up, never "0 of 0 units up". Exit status as on hosts:
# 0 when the state could be read. On kmock (no controller: the tests write the pods).
READY = {
    "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "vllm", "image": "vllm"}]},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
}


def test_a_deployment_without_pods_counts_its_replicas_as_not_up(cluster, tmp_path):
    tgt, _ = applied(cluster, "kquota", replicas=2)  # no pod: a ResourceQuota refused them
    try:
        spec, kubeconfig = write_kube_files(cluster.url, tmp_path, "kquota", replicas=2)
        kc = ("--kubeconfig", str(kubeconfig))
        out = checked(pdctl("status", str(spec), "-o", "json", *kc))
        assert json.loads(out.stdout)["summary"] == {
            "units": 2, "up": 0, "roles": {"serve": 2}, "upByRole": {"serve": 0}, "degraded": []}
        table = checked(pdctl("status", str(spec), *kc))
        assert "0 of 2 units up (serve 0/2)" in table.stdout, table.stdout
        put_pod(tgt, READY, "kquota-serve-5d9c-a")  # one replica got its pod, and is ready
        table = pdctl("status", str(spec), *kc)
        assert "1 of 2 units up (serve 1/2)" in table.stdout, table.stdout
    finally:
        tgt._call("DELETE", f"/api/v1/namespaces/{NS}/pods/kquota-serve-5d9c-a")
        tgt.delete_objects(volumes=True)


def serving_lws(replicas: int, ready: int) -> dict:
    """The serve role's LeaderWorkerSet big-serve as its controller reports it."""
    return {
        "metadata": {"name": "big-serve", "generation": 1,
                     "labels": {"app.kubernetes.io/component": "serve"}},
        "spec": {"replicas": replicas},
        "status": {"observedGeneration": 1, "replicas": replicas, "readyReplicas": ready},
    }


def pod(name: str, ready: bool) -> dict:
    labels = {"app.kubernetes.io/component": "serve"}
    cond = {"type": "Ready", "status": "True" if ready else "False"}
    return {"metadata": {"name": name, "labels": labels}, "status": {"conditions": [cond]}}


def test_a_leader_worker_set_counts_each_group_without_pods():
    rows = [r.__dict__ for r in status_rows([], [], leader_worker_sets=[serving_lws(1, 0)])]
    assert status_line(rows) == "0 of 1 unit up (serve 0/1)"
    two = serving_lws(2, 1)
    pods = [pod("big-serve-0", True), pod("big-serve-0-1", True)]  # group 0: leader, worker
    rows = [r.__dict__ for r in status_rows([], pods, leader_worker_sets=[two])]
    assert status_counts(rows) == {"units": 3, "up": 2, "roles": {"serve": 3},
                                   "upByRole": {"serve": 2}, "degraded": []}


def test_hosts_rows_count_as_before():
    rows = [
        {"role": "serve", "health": "healthy", "state": "running"},
        {"role": "serve", "health": "-", "state": "stopped"},
    ]
    assert status_line(rows) == "1 of 2 units up (serve 1/2)"
