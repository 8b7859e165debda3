"""`up` never takes over an object it did not make: a live object at a name the bundle renders
that is not this deployment's (pdctl's labels, this instance, pdctl's hash annotation, and on
a cluster-scoped object this namespace) stops `up` before anything is applied, in one line
naming it and who seems to own it; `down` then leaves it alone. Cluster-scoped names carry the
namespace and the deployment name joined by a dot, which neither can contain, so two
deployments never render the same ClusterRole. Against kmock (conftest.py)."""

from __future__ import annotations

import re

import pytest
import yaml

from pdctl.errors import PdctlError
from pdctl.targets.kube.api import HASH_ANNOTATION, NAMESPACE_ANNOTATION
from tests.helpers import checked
from tests.targets.kube.test_kinds import plan_objects, spec_data, target, write_files
from tests.targets.testbed import pdctl

NS = "vllm-inference"
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def foreign_service(name: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NS, "labels": {"owner": "someone-else"}},
        "spec": {"selector": {"app": "payments"}, "ports": [{"port": 80}]},
    }


def test_up_refuses_a_service_it_did_not_make_and_down_keeps_it(cluster, tmp_path) -> None:
    data = spec_data("phase1-k8s", name="kmine")
    plan, _ = plan_objects(data)
    tgt = target(cluster, plan)
    svc = foreign_service("kmine")
    tgt._call("POST", tgt._path("Service"), svc)
    spec, kubeconfig = write_files(cluster, tmp_path, data)
    try:
        up = checked(pdctl("up", spec, "--yes", "--timeout", "1", "--kubeconfig", kubeconfig), 1)
        line = up.stderr.strip()
        assert len(line.splitlines()) == 1, line
        assert "Service/kmine" in line and "owner=someone-else" in line, line
        assert "nothing applied" in line and "rename the deployment" in line, line
        live = tgt.get("Service", "kmine")
        assert live["metadata"]["labels"] == {"owner": "someone-else"}
        assert live["spec"]["selector"] == {"app": "payments"}
        assert tgt.owned() == []  # nothing else applied either
        checked(pdctl("down", spec, "--yes", "--kubeconfig", kubeconfig))
        assert tgt.get("Service", "kmine") is not None
    finally:
        tgt._call("DELETE", tgt._path("Service", "kmine"))
        tgt.delete_objects(volumes=True)


def test_an_object_of_another_pdctl_deployment_is_named_as_its_owner(cluster) -> None:
    plan, objs = plan_objects(spec_data("phase1-k8s", name="kother"))
    tgt = target(cluster, plan)
    svc = foreign_service("kother")
    svc["metadata"]["labels"] = {
        "app.kubernetes.io/instance": "payments", "app.kubernetes.io/managed-by": "pdctl",
    }
    svc["metadata"]["annotations"] = {HASH_ANNOTATION: "x"}
    tgt._call("POST", tgt._path("Service"), svc)
    try:
        with pytest.raises(PdctlError, match="pdctl deployment 'payments'"):
            tgt.object_changes(objs)
        with pytest.raises(PdctlError, match="Service/kother"):
            tgt.apply_objects(objs)
        assert tgt.owned() == []
    finally:
        tgt._call("DELETE", tgt._path("Service", "kother"))


def test_a_cluster_role_of_the_same_deployment_in_another_namespace_is_refused(cluster) -> None:
    plan, objs = plan_objects(spec_data("phase2-llmd", name="kcluster"))
    tgt = target(cluster, plan)
    role = next(o for o in objs if o["kind"] == "ClusterRole")
    other = yaml.safe_load(yaml.safe_dump(role))
    other["metadata"]["annotations"] = {HASH_ANNOTATION: "x", NAMESPACE_ANNOTATION: "elsewhere"}
    path = tgt._path("ClusterRole", api_version=role["apiVersion"])
    tgt._call("POST", path, other)
    name = role["metadata"]["name"]
    try:
        refused = f"ClusterRole/{re.escape(name)}.*namespace 'elsewhere'"
        with pytest.raises(PdctlError, match=refused):
            tgt.object_changes(objs)
        assert tgt.owned() == []
    finally:
        tgt._call("DELETE", tgt._path("ClusterRole", name, api_version=role["apiVersion"]))


def cluster_names(namespace: str, name: str) -> set[str]:
    data = spec_data("phase2-llmd", name=name)
    data["kubernetes"]["namespace"] = namespace
    _, objs = plan_objects(data)
    return {
        o["metadata"]["name"] for o in objs if o["kind"] in ("ClusterRole", "ClusterRoleBinding")
    }


def test_cluster_scoped_names_of_two_deployments_never_collide() -> None:
    first = cluster_names("llm", "d-qwen-llmd")
    second = cluster_names("llm-d", "qwen-llmd")
    assert first and second and not first & second
    longest = cluster_names("n" * 63, "d" + "x" * 49)
    for name in first | second | longest:
        assert len(name) <= 253 and DNS1123_SUBDOMAIN.fullmatch(name), name
