"""Multi-node instances on Kubernetes: a LeaderWorkerSet (render/lws.py), checked against the
real LWS CRD schema (tests/data/crds), its pod templates strictly against Kubernetes 1.29,
its flags against the pinned vLLM; the kube target applies it, waits on it and deletes it
(on kmock, which serves the CRD but runs no controller: the test acts as LWS's)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest

from pdctl.compat import release
from pdctl.errors import PdctlError
from pdctl.plan import make_plan
from pdctl.plan.group import RESOLVE_TRIES
from pdctl.render import render
from pdctl.spec import load_text
from tests.conftest import K8S_VERSION
from tests.render.check import crd_schema
from tests.targets.kube.examples import example_data, kube_target, plan_objects

PATH = os.environ.get("PATH", "/usr/bin:/bin")  # getent resolves the leader's name

ROOT = Path(__file__).resolve().parents[3]
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


def lws_plan(**serve: object):
    return plan_objects(example_data("phase1-lws", serve=serve))


def the(objs: list[dict], kind: str) -> dict:
    (found,) = [o for o in objs if o["kind"] == kind]
    return found


def templates(lws: dict) -> tuple[dict, dict]:
    t = lws["spec"]["leaderWorkerTemplate"]
    return t["leaderTemplate"], t["workerTemplate"]


def as_pod(template: dict) -> dict:
    meta = {"name": "p", **template["metadata"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


def flags_in(container: dict) -> set[str]:
    words = [*container["args"], *container["command"]]
    return {m for w in words for m in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", w)}


@pytest.mark.parametrize(
    "serve",
    [{}, {"tensorParallel": 1, "pipelineParallel": 1, "dataParallel": 16, "expertParallel": True}],
    ids=["tp-pp", "dp-ep"],
)
def test_lws_is_schema_valid_and_its_pods_strictly_valid(serve: dict) -> None:
    plan, objs = lws_plan(**serve)
    lws = the(objs, "LeaderWorkerSet")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    jsonschema.validate(lws, crd_schema("LeaderWorkerSet", "v1"))
    for template in templates(lws):
        kubernetes_validate.validate(as_pod(template), K8S_VERSION, strict=True)
    for obj in objs:
        if obj["kind"] != "LeaderWorkerSet":
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    assert ("leaderworkerset.x-k8s.io", "LeaderWorkerSet") in plan.kinds
    assert "Deployment" not in {o["kind"] for o in objs}


@pytest.mark.parametrize("version", ["0.23.0", "0.33.0"])
@pytest.mark.parametrize("dp", [1, 16])
def test_every_flag_of_leader_and_worker_exists_in_the_pinned_vllm(version: str, dp: int) -> None:
    serve = {"dataParallel": dp, "tensorParallel": 1, "pipelineParallel": 1} if dp > 1 else {}
    _, objs = plan_objects(example_data("phase1-lws", engine={"version": version}, serve=serve))
    lws = the(objs, "LeaderWorkerSet")
    rel = release(version)
    for template in templates(lws):
        (container,) = template["spec"]["containers"]
        for flag in flags_in(container):
            assert rel.has_flag(flag), f"{flag} is not in vLLM {version}"


def test_tp_pp_group_ranks_come_from_lws_and_workers_are_headless() -> None:
    _, objs = lws_plan()
    lws = the(objs, "LeaderWorkerSet")
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader, worker = (t["spec"]["containers"][0] for t in templates(lws))
    for c in (leader, worker):
        assert c["command"][:2] == ["/bin/sh", "-c"]
        assert '--node-rank "$LWS_WORKER_INDEX"' in c["command"][2]
        assert '--master-addr "$leader"' in c["command"][2]
        assert 'getent ahostsv4 "$LWS_LEADER_ADDRESS"' in c["command"][2]
        assert c["args"][c["args"].index("--nnodes") + 1] == "2"
        assert c["args"][c["args"].index("--master-port") + 1] == "29501"
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "--headless" in worker["args"] and "--headless" not in leader["args"]
    assert "readinessProbe" in leader and "ports" in leader
    assert "readinessProbe" not in worker and "ports" not in worker
    svc = the(objs, "Service")
    assert svc["spec"]["selector"][WORKER_INDEX] == "0"


def launch(script: str, index: str, leader: str, *args: str) -> subprocess.CompletedProcess:
    """A pod's launch `script` under sh, as LWS's pod `index` with the leader named `leader`."""
    env = {"LWS_WORKER_INDEX": index, "LWS_LEADER_ADDRESS": leader, "PATH": PATH}
    return subprocess.run(["sh", "-c", script, "vllm", *args], env=env, capture_output=True,
                          text=True)


def test_dp_worker_start_rank_is_its_index_times_the_local_ranks() -> None:
    _, objs = lws_plan(tensorParallel=1, pipelineParallel=1, dataParallel=16)
    leader, worker = (t["spec"]["containers"][0] for t in templates(the(objs, "LeaderWorkerSet")))
    assert leader["args"][leader["args"].index("--data-parallel-size-local") + 1] == "8"
    assert "--data-parallel-start-rank" not in leader["command"][2]
    script = worker["command"][2]
    assert '--data-parallel-start-rank "$((LWS_WORKER_INDEX * 8))"' in script
    # The shell gives vLLM exactly the container's args, then the per-pod flags.
    out = launch(script.replace("exec vllm serve", "echo"), "1", "localhost", "a b", "--x")
    assert out.returncode == 0, out.stderr
    # the leader's name resolved (getent) to 127.0.0.1
    assert out.stdout.split() == [
        "a", "b", "--x", "--data-parallel-address", "127.0.0.1", "--data-parallel-start-rank", "8",
    ]


def test_the_leader_name_is_resolved_or_the_pod_stops_with_one_line() -> None:
    """--master-addr / --data-parallel-address get the leader's IP, not its DNS name (some
    vLLM builds' ZMQ did not resolve names); a name that never resolves stops the pod with
    one line naming the variable and what to check (retries shortened here)."""
    for over in ({}, {"tensorParallel": 1, "pipelineParallel": 1, "dataParallel": 16}):
        _, objs = lws_plan(**over)
        for template in templates(the(objs, "LeaderWorkerSet")):
            script = template["spec"]["containers"][0]["command"][2]
            assert "$LWS_LEADER_ADDRESS" not in script.split("exec vllm serve", 1)[1]
            run = script.replace("exec vllm serve", "echo").replace("sleep 2", ":")
            tries = f'-ge {RESOLVE_TRIES} ]'
            assert tries in run
            run = run.replace(tries, "-ge 3 ]")  # each failed lookup of x.invalid takes time
            done = launch(run, "0", "localhost")
            assert done.returncode == 0, done.stderr
            ok = done.stdout.split()
            flag = "--master-addr" if not over else "--data-parallel-address"
            assert ok[ok.index(flag) + 1] == "127.0.0.1"
            bad = launch(run, "1", "x.invalid")
            assert bad.returncode == 1 and bad.stdout == ""
            assert bad.stderr.count("\n") == 1
            assert "LWS_LEADER_ADDRESS=x.invalid" in bad.stderr
            assert "to an IP address" in bad.stderr


def test_kube_target_applies_waits_on_and_deletes_the_lws(cluster) -> None:
    plan, objs = plan_objects(example_data("phase1-lws", name="klws"))
    tgt = kube_target(cluster.url, plan)
    tgt.apply_objects(objs)
    lws = tgt.get("LeaderWorkerSet", "klws-serve", api_version="leaderworkerset.x-k8s.io/v1")
    assert lws is not None and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    with pytest.raises(PdctlError, match="LeaderWorkerSet/klws-serve not rolled out"):
        tgt.wait(objs, timeout=0.5, poll=0.1)  # no controller: no group is ready
    # Act as the LWS controller would once the group's pods are ready.
    status = {
        "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1}
    }
    path = tgt._path("LeaderWorkerSet", "klws-serve", api_version="leaderworkerset.x-k8s.io/v1")
    tgt._call("PATCH", path, status, content_type="application/merge-patch+json")
    tgt.wait(objs, timeout=5, poll=0.1)
    deleted = tgt.delete_objects(volumes=True)
    assert ("LeaderWorkerSet", "klws-serve") in deleted
    assert (
        tgt.get("LeaderWorkerSet", "klws-serve", api_version="leaderworkerset.x-k8s.io/v1") is None
    )
    assert tgt.owned() == []


# Phase 2 on Kubernetes (llm-d), wide EP: prefill and decode each a LeaderWorkerSet --------------
POOL_LABEL = "pdctl.io/pool"


def wide_ep(**changes: object) -> tuple[object, list[dict]]:
    return plan_objects(example_data("phase2-wide-ep", **changes), target="kubernetes")


def lws_named(objs: list[dict], suffix: str) -> dict:
    (found,) = [
        o for o in objs if o["kind"] == "LeaderWorkerSet" and o["metadata"]["name"].endswith(suffix)
    ]
    return found


def test_wide_ep_on_kubernetes_is_a_valid_lws_per_role_and_the_pool_selects_leaders() -> None:
    plan, objs = wide_ep()
    assert ("leaderworkerset.x-k8s.io", "LeaderWorkerSet") in plan.kinds
    engines = [o for o in objs if o["kind"] == "Deployment"]
    assert [d["metadata"]["name"] for d in engines] == ["dsv3-wide-ep-epp"]
    pool = the(objs, "InferencePool")
    jsonschema.validate(pool, crd_schema("InferencePool", "v1"))
    wanted = pool["spec"]["selector"]["matchLabels"]
    for role in ("prefill", "decode"):
        lws = lws_named(objs, f"-{role}")
        jsonschema.validate(lws, crd_schema("LeaderWorkerSet", "v1"))
        assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
        leader, worker = templates(lws)
        for template in (leader, worker):
            kubernetes_validate.validate(as_pod(template), K8S_VERSION, strict=True)
        assert wanted.items() <= leader["metadata"]["labels"].items()
        assert POOL_LABEL not in worker["metadata"]["labels"]  # workers serve no HTTP
        (lc,) = [c for c in leader["spec"]["containers"] if c["name"] == "vllm"]
        (wc,) = worker["spec"]["containers"]
        assert "--headless" in wc["args"] and "--headless" not in lc["args"]
        assert "readinessProbe" in lc and "readinessProbe" not in wc
        for c in (lc, wc):
            assert c["args"][c["args"].index("--data-parallel-size") + 1] == "16"
            assert c["args"][c["args"].index("--data-parallel-size-local") + 1] == "8"
            assert "--enable-expert-parallel" in c["args"]
            assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
            assert '--data-parallel-address "$leader"' in c["command"][2]
            assert {p["containerPort"] for p in c["ports"]} >= set(range(5600, 5608))
        assert '--data-parallel-start-rank "$((LWS_WORKER_INDEX * 8))"' in wc["command"][2]
    dec_leader, dec_worker = templates(lws_named(objs, "-decode"))
    assert [c["name"] for c in dec_leader["spec"]["initContainers"]] == ["routing-proxy"]
    assert "initContainers" not in dec_worker["spec"]
    assert "serviceAccountName" not in dec_worker["spec"]
    (lc,) = dec_leader["spec"]["containers"]
    assert lc["args"][lc["args"].index("--port") + 1] == "8200"  # behind the sidecar on 8000


def test_wide_ep_side_channel_ports_are_the_ranks_of_each_pod() -> None:
    """vLLM's NIXL side channel listens on VLLM_NIXL_SIDE_CHANNEL_PORT + the global DP rank:
    the launch lowers the base by the pod's first rank, so every pod's ranks use 5600..5607."""
    _, objs = wide_ep()
    _, worker = templates(lws_named(objs, "-prefill"))
    script = worker["spec"]["containers"][0]["command"][2]
    probe = script.replace("exec vllm serve", 'echo "$VLLM_NIXL_SIDE_CHANNEL_PORT"')
    done = launch(probe, "1", "localhost")
    assert done.returncode == 0, done.stderr
    out = done.stdout.split()
    assert out[0] == "5592"  # + ranks 8..15 = 5600..5607
    assert out[1:] == ["--data-parallel-address", "127.0.0.1", "--data-parallel-start-rank", "8"]


def test_wide_ep_flags_exist_in_the_pinned_vllm() -> None:
    _, objs = wide_ep()
    rel = release("0.33.0")
    for role in ("prefill", "decode"):
        for template in templates(lws_named(objs, f"-{role}")):
            (c,) = [c for c in template["spec"]["containers"] if c["name"] == "vllm"]
            for flag in flags_in(c):
                assert rel.has_flag(flag), flag


def test_one_role_across_nodes_leaves_the_other_a_deployment() -> None:
    _, objs = wide_ep(decode={"nodes": 1, "dataParallel": 8, "hosts": ["gpu-c"]})
    assert [o["metadata"]["name"] for o in objs if o["kind"] == "LeaderWorkerSet"] == [
        "dsv3-wide-ep-prefill"
    ]
    deployments = {o["metadata"]["name"] for o in objs if o["kind"] == "Deployment"}
    assert "dsv3-wide-ep-decode" in deployments


def test_wide_ep_with_hami_slices_is_refused() -> None:
    data = example_data("phase2-wide-ep", phase=3, decode={"share": {"gpuMemoryPercent": 50}})
    with pytest.raises(PdctlError, match="decode.share slices GPUs") as err:
        plan_objects(data, target="kubernetes")
    assert err.value.path == "prefill.nodes"


def test_kube_target_applies_waits_on_and_deletes_the_wide_ep_groups(cluster) -> None:
    plan, objs = plan_objects(example_data("phase2-wide-ep", name="kwep"), target="kubernetes")
    tgt = kube_target(cluster.url, plan)
    tgt.apply_objects(objs)
    v1 = "leaderworkerset.x-k8s.io/v1"
    names = ["kwep-prefill", "kwep-decode"]
    for name in names:
        assert tgt.get("LeaderWorkerSet", name, api_version=v1) is not None
    with pytest.raises(PdctlError, match="LeaderWorkerSet/kwep-(prefill|decode) not rolled out"):
        tgt.wait([o for o in objs if o["kind"] == "LeaderWorkerSet"], timeout=0.5, poll=0.1)
    ready = {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1}
    for name in names:
        path = tgt._path("LeaderWorkerSet", name, api_version=v1)
        tgt._call("PATCH", path, {"status": ready}, content_type="application/merge-patch+json")
    tgt.wait([o for o in objs if o["kind"] == "LeaderWorkerSet"], timeout=5, poll=0.1)
    deleted = tgt.delete_objects(volumes=True)
    for name in names:
        assert ("LeaderWorkerSet", name) in deleted
        assert tgt.get("LeaderWorkerSet", name, api_version=v1) is None


def test_wide_ep_on_kubernetes_matches_its_golden(update_golden: bool) -> None:
    """phase2-wide-ep runs on hosts by default (tests/golden/phase2-wide-ep.txt); its
    `--target kubernetes` render is reviewed bytes too."""
    spec, _ = load_text((ROOT / "examples" / "phase2-wide-ep.yaml").read_text(), "x.yaml")
    stream = render(make_plan(spec, target="kubernetes")).stream()
    golden = ROOT / "tests" / "golden" / "kubernetes" / "phase2-wide-ep.txt"
    if update_golden:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(stream)
        return
    assert stream == golden.read_text()


def _admits(policy: dict, labels: dict) -> bool:
    """Whether a rule without ports of `policy` lets pods with `labels` (same namespace) in."""
    for rule in policy["spec"]["ingress"]:
        if "ports" in rule:
            continue
        for peer in rule.get("from", []):
            want = peer.get("podSelector", {}).get("matchLabels", {})
            if "namespaceSelector" not in peer and want.items() <= labels.items():
                return True
    return False


def test_network_policies_let_a_groups_pods_reach_each_other() -> None:
    data = example_data("phase2-wide-ep", kubernetes={"networkPolicy": True})
    data["router"] = {"gateway": "inference-gateway"}
    _, objs = plan_objects(data, target="kubernetes")
    pods = [
        t["metadata"]["labels"]
        for r in ("-prefill", "-decode")
        for t in templates(lws_named(objs, r))
    ]
    policies = [
        o for o in objs if o["kind"] == "NetworkPolicy" and "epp" not in o["metadata"]["name"]
    ]
    assert len(policies) == 2
    for policy in policies:
        kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
        selected = policy["spec"]["podSelector"]["matchLabels"]
        role_pods = [p for p in pods if selected.items() <= p.items()]
        assert len(role_pods) == 2  # the policy covers the role's leader and its workers
        for labels in pods:  # every leader and worker of both roles may reach them
            assert _admits(policy, labels), (policy["metadata"]["name"], labels)
    assert not _admits(policies[0], {"app.kubernetes.io/name": "vllm"})
