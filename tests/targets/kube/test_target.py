"""The Kubernetes target against the `kmock` emulator (an in-memory API server over HTTP).

No kube-apiserver can run on these machines. kmock stores objects and answers REST calls and
API discovery (seeded with a real cluster's resource lists in conftest.py), but has no
controllers, no defaulting, no real server-side apply (PATCH on a missing object is a
404, so pdctl's create fallback runs), ignores label selectors (pdctl filters by labels again
itself, which these tests check), and cannot create Namespaces (its URL parsing takes
`/api/v1/namespaces/<name>` for a namespace, not an object).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pdctl.targets.kube.api import HASH_ANNOTATION
from pdctl.targets.kube.status import rolled_out
from pdctl.targets.kube.target import KubeTarget
from tests.helpers import checked
from tests.targets.kube.examples import example_data, plan_objects, roll_out
from tests.targets.kubeconfig import write_kubeconfig
from tests.targets.testbed import pdctl


@pytest.fixture
def server(cluster):
    """The kmock cluster of conftest.py (the built-in API and its discovery)."""
    return cluster.url


@pytest.fixture
def api(server):
    from kubernetes import client

    return client.ApiClient(client.Configuration(host=server))


def phase1_data(name: str, replicas: int | None = None) -> dict:
    """examples/phase1-k8s.yaml as `name` (kmock cannot create cluster-scoped objects), with
    `replicas` (else the example's 2)."""
    data = example_data("phase1-k8s", name=name, kubernetes={"createNamespace": False})
    if replicas is not None:
        data["serve"]["replicas"] = replicas
    return data


def phase1(name: str, replicas: int = 1) -> tuple:
    return plan_objects(phase1_data(name, replicas))


def target(api, plan, objs: list[dict] | None = None) -> KubeTarget:  # type: ignore[no-untyped-def]
    """The KubeTarget of `plan`, `objs` applied."""
    tgt = KubeTarget(api, plan.name, plan.spec.kubernetes.namespace)
    if objs is not None:
        tgt.apply_objects(objs)
    return tgt


def test_apply_creates_then_changes_nothing(api):
    plan, objs = phase1("kapply")
    tgt = target(api, plan)
    assert {a for a, _, _ in tgt.object_changes(objs)} == {"create"}
    tgt.apply_objects(objs)
    assert {a for a, _, _ in tgt.object_changes(objs)} == {"unchanged"}
    dep = tgt.get("Deployment", "kapply-serve")
    assert dep["metadata"]["annotations"][HASH_ANNOTATION]
    assert sorted(k for k, _ in tgt.owned()) == ["Deployment", "PersistentVolumeClaim", "Service"]
    tgt.delete_objects(volumes=True)


def test_spec_change_updates_only_that_object(api):
    plan, objs = phase1("kupdate")
    tgt = target(api, plan, objs)
    _, changed = phase1("kupdate", replicas=3)
    actions = {(k, a) for a, k, _ in tgt.object_changes(changed)}
    assert ("Deployment", "update") in actions
    assert ("Service", "unchanged") in actions
    tgt.apply_objects(changed)
    assert tgt.get("Deployment", "kupdate-serve")["spec"]["replicas"] == 3
    assert {a for a, _, _ in tgt.object_changes(changed)} == {"unchanged"}
    tgt.delete_objects(volumes=True)


def test_prune_removes_what_is_no_longer_rendered_and_nothing_else(api):
    plan, objs = phase1("kprune")
    tgt = target(api, plan)
    ns = plan.spec.kubernetes.namespace
    labels = {"app.kubernetes.io/instance": "other"}
    meta = {"name": "someone-else", "namespace": ns, "labels": labels}
    foreign = {"apiVersion": "v1", "kind": "Service", "metadata": meta}
    foreign["spec"] = {"ports": [{"port": 80}]}
    tgt._call("POST", tgt._path("Service"), foreign)
    tgt.apply_objects(objs)
    without_service = [o for o in objs if o["kind"] != "Service"]
    assert ("prune", "Service", "kprune") in tgt.object_changes(without_service)
    tgt.apply_objects(without_service)
    assert tgt.get("Service", "kprune") is None
    assert tgt.get("Service", "someone-else") is not None  # another owner's object stays
    tgt.delete_objects(volumes=True)
    assert tgt.get("Service", "someone-else") is not None
    tgt._call("DELETE", tgt._path("Service", "someone-else"))


def test_delete_by_label_twice_is_harmless(api):
    plan, objs = phase1("kdelete")
    tgt = target(api, plan, objs)
    assert len(tgt.delete_objects(volumes=True)) == 3
    assert tgt.owned() == []
    assert tgt.delete_objects(volumes=True) == []


def test_delete_keeps_the_model_cache_claim_unless_asked(api):
    """The PVC holds the downloaded weights: `down` keeps it; --delete-volumes removes it."""
    plan, objs = phase1("kkeep")
    tgt = target(api, plan, objs)
    assert sorted(k for k, _ in tgt.delete_objects()) == ["Deployment", "Service"]
    assert tgt.kept == [("PersistentVolumeClaim", "kkeep-model-cache")]
    assert tgt.owned() == [("PersistentVolumeClaim", "kkeep-model-cache")]
    assert tgt.delete_objects() == [] and tgt.kept == [
        ("PersistentVolumeClaim", "kkeep-model-cache")
    ]
    assert tgt.delete_objects(volumes=True) == [("PersistentVolumeClaim", "kkeep-model-cache")]
    assert tgt.owned() == [] and tgt.kept == []


def test_wait_for_rollout(api):
    plan, objs = phase1("kwait")
    tgt = target(api, plan, objs)
    from pdctl.errors import PdctlError

    with pytest.raises(PdctlError, match="not rolled out"):
        tgt.wait(objs, timeout=0.5, poll=0.1)  # no controller: never rolls out
    roll_out(tgt, "kwait-serve")  # as the Deployment controller would
    assert rolled_out(tgt.get("Deployment", "kwait-serve"))
    tgt.wait(objs, timeout=5, poll=0.1)
    rows = tgt.status()
    assert rows[0].unit == "kwait-serve" and rows[0].health == "healthy"
    tgt.delete_objects(volumes=True)


def write_kube_files(
    server: str, tmp_path: Path, name: str, replicas: int | None = None
) -> tuple[Path, Path]:
    kubeconfig = write_kubeconfig(tmp_path, server)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(phase1_data(name, replicas)))
    return spec, kubeconfig


def test_cli_up_applies_then_waits_for_rollout(server, tmp_path, api):
    spec, kubeconfig = write_kube_files(server, tmp_path, "kup")
    offline = pdctl("up", str(spec), "--dry-run", "--offline")  # no kubeconfig: no connection
    assert offline.returncode == 0, offline.stderr
    assert "apply Deployment/kup-serve" in offline.stdout
    # --dry-run alone is a server-side dry run (dryRun=All); kmock ignores dryRun, so pdctl
    # refuses it and changes nothing (test_kube_diff.py runs it on a kmock that honours it).
    dry = pdctl("up", str(spec), "--dry-run", "--kubeconfig", str(kubeconfig))
    assert dry.returncode == 2 and "ignores dryRun=All" in dry.stderr, dry.stderr
    assert KubeTarget(api, "kup", "vllm-inference").owned() == []
    # kmock has no controller, so the rollout never completes: up applies, then times out.
    up = pdctl("up", str(spec), "--yes", "--timeout", "1", "--kubeconfig", str(kubeconfig))
    assert up.returncode == 1
    assert "create   Deployment/kup-serve" in up.stdout
    assert "Deployment/kup-serve not rolled out" in up.stderr
    tgt = KubeTarget(api, "kup", "vllm-inference")
    assert sorted(k for k, _ in tgt.owned()) == ["Deployment", "PersistentVolumeClaim", "Service"]
    again = pdctl("up", str(spec), "--yes", "--timeout", "1", "--kubeconfig", str(kubeconfig))
    assert "nothing to change" in again.stdout
    # ... and still waits for the rollout (which kmock never completes), as the first up did.
    assert again.returncode == 1 and "not rolled out" in again.stderr, again.stderr
    tgt.delete_objects(volumes=True)


def test_cli_down_and_status_against_the_emulator(server, tmp_path, api):
    plan, objs = phase1("kcli")
    tgt = target(api, plan, objs)
    spec, kubeconfig = write_kube_files(server, tmp_path, "kcli")
    status = checked(pdctl("status", str(spec), "-o", "json", "--kubeconfig", str(kubeconfig)))
    assert '"unit": "kcli-serve"' in status.stdout
    down = checked(pdctl("down", str(spec), "--yes", "--kubeconfig", str(kubeconfig)))
    assert "deleted 2 objects" in down.stdout
    assert "kept PersistentVolumeClaim kcli-model-cache; --delete-volumes removes it" in down.stdout
    assert tgt.owned() == [("PersistentVolumeClaim", "kcli-model-cache")]
    again = pdctl("down", str(spec), "--yes", "--kubeconfig", str(kubeconfig), "--delete-volumes")
    assert "deleted 1 objects" in again.stdout, again.stdout + again.stderr
    assert "kept" not in again.stdout
    assert tgt.owned() == []
    last = pdctl("down", str(spec), "--yes", "--kubeconfig", str(kubeconfig))
    assert "nothing to delete" in last.stdout
