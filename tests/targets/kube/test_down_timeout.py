"""`pdctl down --timeout SECONDS` on Kubernetes: how long down waits for the deployment's pods
to be gone after deleting its objects (default 300 s, as before), then names those left,
exit 1. On kmock, which has no garbage collector: a pod written there stays."""

from __future__ import annotations

from kubernetes import client

from pdctl.targets.kube.target import KubeTarget
from tests.targets.kube.test_status_reasons import put_pod
from tests.targets.kube.test_target import phase1, write_kube_files
from tests.targets.test_stages import LOADING
from tests.targets.testbed import pdctl

NS = "vllm-inference"


def test_down_waits_for_the_pods_as_long_as_timeout_says(cluster, tmp_path):
    tgt = KubeTarget(client.ApiClient(client.Configuration(host=cluster.url)), "kdt", NS)
    _, objs = phase1("kdt")
    tgt.apply_objects(objs)
    put_pod(tgt, LOADING, "kdt-serve-a")  # stays: nothing deletes it
    try:
        spec, kubeconfig = write_kube_files(cluster.url, tmp_path, "kdt")
        kc = ("--kubeconfig", str(kubeconfig))
        out = pdctl("down", str(spec), "--yes", "--timeout", "1", *kc)
        assert out.returncode == 1, out.stderr
        assert "pods still run after 1 s: kdt-serve-a;" in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert tgt.owned() == [("PersistentVolumeClaim", "kdt-model-cache")]  # kept, as always
        bad = pdctl("down", str(spec), "--yes", "--timeout", "0", *kc)
        assert bad.returncode == 2 and "--timeout" in bad.stderr, bad.stderr
    finally:
        tgt._call("DELETE", f"/api/v1/namespaces/{NS}/pods/kdt-serve-a")
        tgt.delete_objects(volumes=True)
