"""Phase 3 on Kubernetes: the HAMi checks beyond registration and health, against the recorded
cluster facts (tests/fixtures/gpu/k8s) with HAMi's workloads as its chart renders them
(charts/hami/templates/scheduler/deployment.yaml: the extender always gets
`--scheduler-name=<schedulerName>`; the labels carry the chart and app version)."""

from __future__ import annotations

import json

from pdctl.preflight.facts import CLUSTER
from pdctl.preflight.registry import facts_from, run_checks
from tests.preflight.conftest import raw_of
from tests.preflight.test_kube import K8S, _plan


def cluster(
    version: str = "2.8.1",
    plugin: str | None = None,
    scheduler: str = "hami-scheduler",
    gpu_a_allocatable: str = "20",
) -> dict[str, str]:
    raw = raw_of(K8S / CLUSTER)
    work = json.loads(raw["workloads.json"])
    for item in work["items"]:
        comp = item["metadata"]["labels"]["app.kubernetes.io/component"]
        v = version if comp == "hami-scheduler" else (plugin or version)
        item["metadata"]["labels"]["helm.sh/chart"] = f"hami-{v}"
        containers = [{"name": "device-plugin", "image": f"projecthami/hami:v{v}"}]
        if comp == "hami-scheduler":
            containers = [
                {
                    "name": "kube-scheduler",
                    "image": "registry.k8s.io/kube-scheduler:v1.31.0",
                    "command": ["kube-scheduler", "--config=/config/config.yaml"],
                },
                {
                    "name": "vgpu-scheduler-extender",
                    "image": f"projecthami/hami:v{v}",
                    "command": [
                        "scheduler",
                        "--http_bind=0.0.0.0:443",
                        f"--scheduler-name={scheduler}",
                    ],
                },
            ]
        item["spec"]["template"] = {"spec": {"containers": containers}}
    nodes = json.loads(raw["nodes.json"])
    for n in nodes["items"]:
        if n["metadata"]["name"] == "gpu-a":
            n["status"]["allocatable"]["nvidia.com/gpu"] = gpu_a_allocatable
    raw = dict(raw, **{"workloads.json": json.dumps(work), "nodes.json": json.dumps(nodes)})
    return {CLUSTER: raw}


def found(raw: dict[str, dict[str, str]], check: str):
    return [f for f in run_checks(_plan("phase3-hami.yaml"), facts_from(raw)) if f.check == check]


def test_a_healthy_hami_passes_scheduler_version_and_allocatable() -> None:
    raw = cluster()
    (sched,) = found(raw, "hami.scheduler")
    assert (sched.status, sched.where) == ("PASS", "kube-system/hami-scheduler")
    assert sched.found == "--scheduler-name=hami-scheduler"
    (version,) = found(raw, "hami.version")
    assert version.status == "PASS"
    assert version.found == "hami-scheduler 2.8.1, hami-device-plugin 2.8.1"
    assert found(raw, "hami.allocatable") == []


def test_a_scheduler_under_another_name_fails() -> None:
    (sched,) = found(cluster(scheduler="my-scheduler"), "hami.scheduler")
    assert sched.status == "FAIL" and "stay Pending" in sched.fix


def test_an_old_scheduler_cannot_read_json_registration() -> None:
    # gpu-a registers in JSON (a >= 2.8 device plugin), the scheduler is 2.7.1
    (version,) = found(cluster(version="2.7.1", plugin="2.8.1"), "hami.version")
    assert version.status == "FAIL" and "JSON device registration on gpu-a" in version.found
    (mixed,) = found(cluster(version="2.8.1", plugin="2.8.2"), "hami.version")
    assert mixed.status == "WARN"


def test_registered_gpus_without_allocatable_fail() -> None:
    (alloc,) = found(cluster(gpu_a_allocatable="0"), "hami.allocatable")
    assert (alloc.status, alloc.where) == ("FAIL", "gpu-a")
    assert "nvidia.com/gpu allocatable 0" in alloc.found


def test_the_recorded_facts_without_versions_add_no_version_finding() -> None:
    raw = {CLUSTER: raw_of(K8S / CLUSTER)}
    assert found(raw, "hami.version") == [] and found(raw, "hami.scheduler") == []
