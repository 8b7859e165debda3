"""Cluster facts from recorded node JSON (GPU feature discovery labels, HAMi registration in
both encodings), HAMi workloads and CRDs; and gathering them through the real kubernetes
client from kmock's API emulator seeded with the same objects."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pdctl.preflight.facts import CLUSTER
from pdctl.preflight.registry import facts_from, run_checks
from tests.conftest import ROOT
from tests.helpers import plan_of
from tests.preflight.conftest import FIX, json_findings, pdctl, raw_of

K8S = FIX / "k8s"


def _plan(name: str, **edits: str):
    text = (ROOT / "examples" / name).read_text()
    for old, new in edits.items():
        text = text.replace(old, new)
    return plan_of(text, name)


def _facts():
    return facts_from({CLUSTER: raw_of(K8S / CLUSTER)})


def _status(found, check: str) -> list[str]:
    return [f.status for f in found if f.check == check]


def test_phase1_whole_gpus() -> None:
    found = run_checks(_plan("phase1-k8s.yaml"), _facts())
    assert _status(found, "cluster.gpus") == ["PASS"]
    assert _status(found, "cluster.driver") == ["WARN"]  # gpu-c runs driver 535
    assert _status(found, "model.fit") == ["PASS"]
    text = (ROOT / "examples" / "phase1-k8s.yaml").read_text()
    assert "replicas: 2" in text
    many = run_checks(_plan("phase1-k8s.yaml", **{"replicas: 2": "replicas: 13"}), _facts())
    assert _status(many, "cluster.gpus") == ["FAIL"]


def test_phase3_hami() -> None:
    found = run_checks(_plan("phase3-hami.yaml"), _facts())
    health = {f.where: f.status for f in found if f.check == "hami.health"}
    assert health == {"gpu-a": "PASS", "gpu-b": "WARN"}  # gpu-b has an unhealthy device
    assert _status(found, "hami.workloads") == ["PASS", "PASS"]
    (slices,) = [f for f in found if f.check == "hami.slices"]
    assert slices.status == "PASS" and slices.found.startswith("6 decode slices")
    decode = [f for f in found if f.check == "model.fit" and "decode" in f.where]
    assert decode and decode[0].found.startswith("HAMi slice 71885 MiB")


def test_phase3_without_hami_fails() -> None:
    facts = _facts()
    cluster = facts.cluster
    assert cluster is not None
    bare = replace(cluster, nodes=tuple(replace(n, hami_devices=None) for n in cluster.nodes),
                   workloads=())
    found = run_checks(_plan("phase3-hami.yaml"), replace(facts, cluster=bare))
    assert _status(found, "hami.register") == ["FAIL"]


def test_phase2_crds() -> None:
    plan = _plan("phase2-llmd.yaml")
    crds = [f for f in run_checks(plan, _facts()) if f.check == "cluster.crds"]
    assert any(f.status == "PASS" and f.found.startswith("InferencePool.") for f in crds)
    assert all("InferencePool" not in f.found for f in crds if f.status == "FAIL")
    facts = _facts()
    assert facts.cluster is not None
    none = replace(facts, cluster=replace(facts.cluster, crds=()))
    failed = [f for f in run_checks(plan, none) if f.check == "cluster.crds"]
    assert any(f.status == "FAIL" and "InferencePool" in f.found for f in failed)
    assert all(f.status == "FAIL" for f in failed)


def test_cli_replay_cluster() -> None:
    proc = pdctl("preflight", str(ROOT / "examples" / "phase3-hami.yaml"), "--replay", str(K8S),
                 "-o", "json")
    assert proc.returncode in (0, 1), proc.stderr
    assert {f["check"] for f in json_findings(proc)} >= {"cluster.gpus", "hami.slices"}


SERVER = """
import asyncio, json, sys, kmock
fix = sys.argv[1]
async def main():
    async with kmock.KubernetesEmulator() as km, kmock.Server(km, port=0) as srv:
        for n in json.load(open(fix + "/nodes.json"))["items"]:
            km.objects["v1/nodes", None, n["metadata"]["name"]] = n
        for w in json.load(open(fix + "/workloads.json"))["items"]:
            plural = "deployments" if w["kind"] == "Deployment" else "daemonsets"
            meta = w["metadata"]
            km.objects["apps/v1/" + plural, meta["namespace"], meta["name"]] = w
        for c in json.load(open(fix + "/crds.json"))["items"]:
            km.objects["apiextensions.k8s.io/v1/customresourcedefinitions", None,
                       c["metadata"]["name"]] = c
        print("serving", str(srv.url).rstrip("/"), flush=True)
        await asyncio.Event().wait()
asyncio.run(main())
"""


@pytest.fixture
def apiserver(tmp_path: Path):
    pytest.importorskip("kmock")
    # The server binds a port the kernel picks and says which once it listens: a port chosen
    # here and released could be taken (an outgoing connection's local port) before it binds.
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(K8S / CLUSTER)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("serving http://"), line + proc.stdout.read()
        url = line.split()[1]
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": {"server": url}}],
            "users": [{"name": "u", "user": {}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        }))
        yield kubeconfig
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_gather_from_api_server_matches_recorded_json(apiserver: Path, tmp_path: Path) -> None:
    spec = str(ROOT / "examples" / "phase3-hami.yaml")
    rec = tmp_path / "rec"
    live = pdctl("preflight", spec, "--kubeconfig", str(apiserver), "--record", str(rec),
                 "-o", "json")
    assert live.returncode in (0, 1), live.stderr
    assert sorted(p.name for p in (rec / CLUSTER).iterdir()) == [
        "crds.json", "nodes.json", "workloads.json"]
    replay = pdctl("preflight", spec, "--replay", str(K8S), "-o", "json")
    assert json_findings(live) == json_findings(replay)


def test_a_kubeconfig_named_but_missing_is_a_usage_error(tmp_path: Path) -> None:
    """As for up/status: a file named on the command line must exist (one line, exit 2)."""
    missing = tmp_path / "missing"
    proc = pdctl("preflight", str(ROOT / "examples" / "phase1-k8s.yaml"), "--kubeconfig",
                 str(missing), "-o", "json")
    assert (proc.returncode, proc.stdout) == (2, ""), proc
    assert proc.stderr.strip().splitlines() == [
        f"error: kubeconfig file {missing} does not exist; check --kubeconfig"
    ]


@pytest.mark.parametrize("env", ["unset", "KUBECONFIG"])
def test_no_kubeconfig_is_a_finding_naming_where_it_looked(tmp_path: Path, env: str) -> None:
    """Without any configuration the cluster.reach finding names the file(s) looked for (the
    client's own words, 'Invalid kube-config file. No configuration found.', name none)."""
    looked = f"{tmp_path}/a:{tmp_path}/b" if env == "KUBECONFIG" else "~/.kube/config"
    base = {"HOME": str(tmp_path), "KUBECONFIG": looked if env == "KUBECONFIG" else None}
    proc = pdctl("preflight", str(ROOT / "examples" / "phase1-k8s.yaml"), "-o", "json", env=base)
    assert proc.returncode == 1, proc
    (reach,) = [f for f in json_findings(proc) if f["check"] == "cluster.reach"]
    named = " ($KUBECONFIG)" if env == "KUBECONFIG" else ""
    assert reach["status"] == "FAIL"
    assert reach["found"] == (
        f"no Kubernetes configuration: {looked}{named} does not exist, and this is not a pod "
        "(no in-cluster account)"
    )


def test_phase3_mig_mode_devices_warn() -> None:
    facts = _facts()
    cluster = facts.cluster
    assert cluster is not None
    nodes = tuple(replace(n, hami_devices=tuple(replace(d, mode="mig")
                                                for d in n.hami_devices or ()) or None)
                  for n in cluster.nodes)
    found = run_checks(_plan("phase3-hami.yaml"), replace(facts, cluster=replace(cluster,
                                                                               nodes=nodes)))
    (mode,) = [f for f in found if f.check == "hami.mode"]
    assert mode.status == "WARN" and "gpu-a: mig" in mode.found
    assert not [f for f in run_checks(_plan("phase3-hami.yaml"), facts) if f.check == "hami.mode"]


# Phase 3: the HAMi checks beyond registration and health, with HAMi's workloads as its chart
# renders them (charts/hami/templates/scheduler/deployment.yaml: the extender always gets
# `--scheduler-name=<schedulerName>`; the labels carry the chart and app version).
def cluster(
    version: str = "2.8.1", plugin: str | None = None, scheduler: str = "hami-scheduler",
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
                    "name": "kube-scheduler", "image": "registry.k8s.io/kube-scheduler:v1.31.0",
                    "command": ["kube-scheduler", "--config=/config/config.yaml"],
                },
                {
                    "name": "vgpu-scheduler-extender",
                    "image": f"projecthami/hami:v{v}",
                    "command": [
                        "scheduler", "--http_bind=0.0.0.0:443", f"--scheduler-name={scheduler}",
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
