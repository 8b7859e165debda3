"""Every kind render emits reaches the cluster: kinds come from API discovery (kmock serving a
Kubernetes 1.29 API and the Gateway API / Inference Extension CRDs, see conftest.py), a kind the
cluster lacks stops `up` before anything is applied, and prune and `down` cover every kind.

kmock cannot create Namespaces (cluster-scoped objects of other kinds work), so the specs here
set `createNamespace: false`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pdctl.errors import SpecError
from pdctl.plan import make_plan
from pdctl.render.bundle import apply_rank as rank
from pdctl.spec import load_text
from pdctl.targets.kube.api import HASH_ANNOTATION, NAMESPACE_ANNOTATION
from pdctl.targets.kube.target import KubeTarget
from tests.conftest import EXAMPLES
from tests.helpers import run_cli
from tests.targets.conftest import KubeServer, builtin_resources, crd_resources, kube_server
from tests.targets.kube.examples import kube_target
from tests.targets.kube.examples import plan_objects as objects_of
from tests.targets.kubeconfig import write_kubeconfig

CRDS = Path(__file__).resolve().parents[2] / "data" / "crds"
GIE_CRD = CRDS / "inference.networking.k8s.io_inferencepools.yaml"
GATEWAY_CRD = CRDS / "gateway.networking.k8s.io_httproutes.yaml"


def kube_examples() -> list[Path]:
    """Every example that renders for Kubernetes (as itself or with --target kubernetes)."""
    out = []
    for example in EXAMPLES:
        spec, _ = load_text(example.read_text(), example.name)
        try:
            make_plan(spec, target="kubernetes")
        except SpecError:
            continue  # phase 0, or a connector llm-d does not wire
        out.append(example)
    return out


KUBE_EXAMPLES = kube_examples()


def test_the_kubernetes_examples_are_all_there() -> None:
    stems = {p.stem for p in KUBE_EXAMPLES}
    assert {"phase1-k8s", "phase2-llmd", "phase2-nixl-hosts", "phase3-hami"} <= stems


def spec_data(example: str, **changes: object) -> dict:
    data = yaml.safe_load((Path(EXAMPLES[0]).parent / f"{example}.yaml").read_text())
    data.setdefault("kubernetes", {})["createNamespace"] = False  # kmock cannot create them
    data.update(changes)
    return data


def plan_objects(data: dict, **how: object) -> tuple:
    return objects_of(data, target="kubernetes", **how)


def write_files(server: KubeServer, tmp_path: Path, data: dict) -> tuple[str, str]:
    kubeconfig = write_kubeconfig(tmp_path, server.url)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    return str(spec), str(kubeconfig)


def target(server: KubeServer, plan) -> KubeTarget:  # type: ignore[no-untyped-def]
    return kube_target(server.url, plan)


@pytest.mark.parametrize("example", KUBE_EXAMPLES, ids=lambda p: p.stem)
def test_up_applies_every_object_of_the_example_and_down_deletes_them(
    example: Path, cluster: KubeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = spec_data(example.stem)
    plan, objs = plan_objects(data)
    spec, kubeconfig = write_files(cluster, tmp_path, data)
    up = [
        "up", spec, "--target", "kubernetes", "--yes", "--timeout", "1", "--kubeconfig", kubeconfig,
    ]
    code, out, err = run_cli(up, capsys)
    # kmock runs no controller, so no Deployment rolls out: up applies all, then times out.
    assert code == 1 and "not rolled out" in err, out + err
    tgt = target(cluster, plan)
    for obj in objs:
        meta = obj["metadata"]
        live = tgt.get(obj["kind"], meta["name"], meta.get("namespace"), obj["apiVersion"])
        assert live is not None, f"{obj['kind']}/{meta['name']} was not applied"
        assert live["metadata"]["annotations"][HASH_ANNOTATION]
        assert f"create   {obj['kind']}/{meta['name']}" in out
    code, out, err = run_cli(up, capsys)
    assert "nothing to change" in out, out + err
    code, out, err = run_cli(
        ["down", spec, "--yes", "--target", "kubernetes", "--delete-volumes"]
        + ["--kubeconfig", kubeconfig],
        capsys,
    )
    assert code == 0, err
    assert f"deleted {len(objs)} objects" in out, out
    assert tgt.owned() == []
    for obj in objs:
        meta = obj["metadata"]
        assert tgt.get(obj["kind"], meta["name"], meta.get("namespace"), obj["apiVersion"]) is None


def test_apply_order_puts_accounts_config_and_services_before_workloads() -> None:
    data = spec_data("phase2-llmd")
    data["kubernetes"]["createNamespace"] = True
    _, objs = plan_objects(data)
    kinds = [o["kind"] for o in objs]
    assert kinds[0] == "Namespace"
    first_workload = kinds.index("Deployment")
    for kind in (
        "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "PersistentVolumeClaim", "Service",
    ):
        assert max(i for i, k in enumerate(kinds) if k == kind) < first_workload, kind
    assert kinds.index("RoleBinding") > max(i for i, k in enumerate(kinds) if k == "Role")
    last_workload = max(i for i, k in enumerate(kinds) if k == "Deployment")
    assert min(kinds.index("InferencePool"), kinds.index("HTTPRoute")) > last_workload
    assert rank("InferencePool") == rank("SomeFutureCustomResource") > rank("Deployment")


def test_server_sees_applies_in_order_and_deletes_in_reverse(cluster: KubeServer) -> None:
    plan, objs = plan_objects(spec_data("phase2-llmd", name="korder"))
    tgt = target(cluster, plan)
    before = len(cluster.log)
    tgt.apply_objects(objs)
    tgt.delete_objects(volumes=True)
    requests = cluster.log[before:]
    plurals = {
        "serviceaccounts": "ServiceAccount", "roles": "Role", "rolebindings": "RoleBinding",
        "configmaps": "ConfigMap", "services": "Service", "deployments": "Deployment",
        "inferencepools": "InferencePool", "httproutes": "HTTPRoute",
    }

    def kinds(method: str) -> list[str]:
        out = []
        for verb, path in requests:
            parts = path.split("/")
            if verb == method and len(parts) > 2 and parts[-2] in plurals:
                out.append(plurals[parts[-2]])
        return out

    applied, deleted = kinds("PATCH"), kinds("DELETE")
    # the llm-d example needs the new kinds (RBAC, accounts, config, custom resources): every
    # one of `plurals` is applied and deleted
    assert [rank(k) for k in applied] == sorted(rank(k) for k in applied)
    assert [rank(k) for k in deleted] == sorted((rank(k) for k in deleted), reverse=True)
    assert set(applied) == set(deleted) == set(plurals.values())


def test_switching_to_phase_1_prunes_the_phase_2_kinds(cluster: KubeServer) -> None:
    data = spec_data("phase2-llmd", name="kswitch", serve={"replicas": 1, "tensorParallel": 1})
    plan, phase2 = plan_objects(data)
    _, phase1 = plan_objects(data, phase=1)
    tgt = target(cluster, plan)
    tgt.apply_objects(phase2)
    kept = {(o["kind"], o["metadata"]["name"]) for o in phase1}
    gone = {(o["kind"], o["metadata"]["name"]) for o in phase2} - kept
    assert {"Role", "RoleBinding", "ServiceAccount", "InferencePool", "HTTPRoute", "ConfigMap"} <= {
        k for k, _ in gone
    }
    pruned = {(k, n) for a, k, n in tgt.object_changes(phase1) if a == "prune"}
    assert pruned == gone
    tgt.apply_objects(phase1)
    assert set(tgt.owned()) == kept
    for obj in phase2:
        live = tgt.get(obj["kind"], obj["metadata"]["name"], None, obj["apiVersion"])
        assert (live is None) == ((obj["kind"], obj["metadata"]["name"]) in gone)
    tgt.delete_objects(volumes=True)
    assert tgt.owned() == []


def test_down_keeps_claims_and_deletes_the_other_new_kinds(cluster: KubeServer) -> None:
    plan, objs = plan_objects(spec_data("phase3-hami", name="kdown3"))
    tgt = target(cluster, plan)
    tgt.apply_objects(objs)
    deleted = tgt.delete_objects()
    assert {k for k, _ in deleted} == {o["kind"] for o in objs} - {"PersistentVolumeClaim"}
    assert tgt.kept == [("PersistentVolumeClaim", "kdown3-model-cache")]
    assert tgt.delete_objects(volumes=True) == [("PersistentVolumeClaim", "kdown3-model-cache")]


def test_prune_and_down_leave_what_pdctl_did_not_apply(cluster: KubeServer) -> None:
    """Controllers copy labels (a Service's onto its Endpoints, a template's onto Pods) but not
    pdctl's hash annotation; a cluster-scoped object of a same-named deployment in another
    namespace carries that namespace. None of them is pruned or deleted."""
    plan, objs = plan_objects(spec_data("phase2-llmd", name="kforeign"))
    tgt = target(cluster, plan)
    ns = plan.spec.kubernetes.namespace
    labels = {"app.kubernetes.io/instance": "kforeign", "app.kubernetes.io/managed-by": "pdctl"}
    endpoints = {
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kforeign-epp", "namespace": ns, "labels": labels},
    }
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "kforeign-decode-1", "uid": "u"}
    pod_meta = {"name": "kforeign-decode-abc", "namespace": ns, "labels": labels,
                "annotations": {HASH_ANNOTATION: "x"}, "ownerReferences": [owner]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta}
    other_meta = {"name": "elsewhere-kforeign-epp-metrics-reader", "labels": labels,
                  "annotations": {HASH_ANNOTATION: "x", NAMESPACE_ANNOTATION: "elsewhere"}}
    other = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "rules": []}
    other["metadata"] = other_meta
    for obj in (endpoints, pod, other):
        path = tgt._path(obj["kind"], namespace=ns, api_version=obj["apiVersion"])
        tgt._call("POST", path, obj)
    tgt.apply_objects(objs)
    tgt.apply_objects([o for o in objs if o["kind"] != "HTTPRoute"])
    tgt.delete_objects(volumes=True)
    assert tgt.owned() == []
    for obj in (endpoints, pod, other):
        assert tgt.get(obj["kind"], obj["metadata"]["name"], ns, obj["apiVersion"]) is not None
        tgt._call("DELETE", tgt._path(obj["kind"], obj["metadata"]["name"], ns, obj["apiVersion"]))


def test_discovery_is_read_once_per_run(cluster: KubeServer) -> None:
    plan, objs = plan_objects(spec_data("phase2-llmd", name="konce"))
    tgt = target(cluster, plan)
    before = len(cluster.log)
    tgt.object_changes(objs)
    tgt.apply_objects(objs)
    tgt.object_changes(objs)
    tgt.status()
    tgt.delete_objects(volumes=True)
    gets = [path for verb, path in cluster.log[before:] if verb == "GET"]
    discovery = [p for p in gets if p in ("/api", "/apis") or p.count("/") == 2
                 or (p.startswith("/apis/") and p.count("/") == 3)]
    assert "/apis" in discovery and "/api/v1" in discovery
    assert "/apis/inference.networking.k8s.io/v1" in discovery
    assert len(discovery) == len(set(discovery)), sorted(discovery)


def missing_crd_run(
    resources: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str, KubeServer]:
    data = spec_data("phase2-llmd", name="kmissing")
    with kube_server(resources) as srv:
        spec, kubeconfig = write_files(srv, tmp_path, data)
        code, out, err = run_cli(["up", spec, "--yes", "--kubeconfig", kubeconfig], capsys)
        writes = [(verb, path) for verb, path in srv.log if verb != "GET"]
        assert writes == [], "something was applied"
        assert not list(srv.emulator.objects)
    return code, out, err, srv


def test_a_missing_crd_is_one_line_and_nothing_is_applied(tmp_path, capsys) -> None:
    code, out, err, _ = missing_crd_run(
        {**builtin_resources(), **crd_resources(GATEWAY_CRD)}, tmp_path, capsys
    )
    assert code == 1
    assert err == (
        "error: the cluster does not serve InferencePool (inference.networking.k8s.io/v1): "
        "install the Gateway API Inference Extension CRDs "
        "(inferencepools.inference.networking.k8s.io) first\n"
    ), err


def test_every_missing_crd_is_named_in_the_one_line(tmp_path, capsys) -> None:
    code, _, err, _ = missing_crd_run(builtin_resources(), tmp_path, capsys)
    assert code == 1
    assert err == (
        "error: the cluster does not serve InferencePool (inference.networking.k8s.io/v1) or "
        "HTTPRoute (gateway.networking.k8s.io/v1): install the Gateway API Inference Extension "
        "CRDs (inferencepools.inference.networking.k8s.io) and the Gateway API CRDs "
        "(httproutes.gateway.networking.k8s.io) first\n"
    ), err


def test_an_old_crd_version_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = crd_resources(GIE_CRD)
    ((key, info),) = old.items()
    old_pool = {key.replace("/v1/", "/v1alpha2/"): info}
    code, _, err, _ = missing_crd_run(
        {**builtin_resources(), **crd_resources(GATEWAY_CRD), **old_pool}, tmp_path, capsys
    )
    assert code == 1
    assert err.count("\n") == 1
    assert (
        "InferencePool (inference.networking.k8s.io/v1, only "
        "inference.networking.k8s.io/v1alpha2 is served)"
    ) in err, err


def test_a_missing_namespace_stops_up_at_the_first_object(tmp_path, capsys) -> None:
    """A real API server answers 404 to an apply and to a create into a namespace that does
    not exist (kmock is told to, for namespace `missing-ns`); `up` must say so, not report
    the object applied."""
    import re

    import kmock

    data = spec_data("phase1-k8s", name="knons")
    data["kubernetes"]["namespace"] = "missing-ns"
    with kube_server(builtin_resources()) as srv:
        not_found = {
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
            "code": 404, "message": 'namespaces "missing-ns" not found',
        }
        into_missing = re.compile(r"/api(s/[^/]+)?/v1/namespaces/missing-ns/.*")
        srv.emulator["post", into_missing] << kmock.Response(status=404, payload=not_found)
        spec, kubeconfig = write_files(srv, tmp_path, data)
        up = ["up", spec, "--yes", "--timeout", "1", "--kubeconfig", kubeconfig]
        code, out, err = run_cli(up, capsys)
        posts = [path for verb, path in srv.log if verb == "POST"]
    assert code == 1
    assert err == (
        "error: PersistentVolumeClaim/knons-model-cache: namespace missing-ns does not exist "
        "(the server answered 404 to apply and to create); create it, or set "
        "kubernetes.createNamespace: true\n"
    ), err
    assert len(posts) == 1, posts
