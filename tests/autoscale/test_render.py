"""Per-role autoscalers for Kubernetes: HPAs pass strict Kubernetes validation, KEDA
ScaledObjects KEDA's own CRD schema (tests/fixtures/crds), targets come from the capacity
plan with how they were derived, LWS groups are scaled as LeaderWorkerSets, bad values exit 2."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from pdctl.errors import SpecError
from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text
from tests.conftest import K8S_VERSION, ROOT
from tests.helpers import cli, run_cli, written

EXAMPLE = ROOT / "examples" / "phase2-k8s-autoscale.yaml"
KEDA_CRD = ROOT / "tests" / "fixtures" / "crds" / "keda.sh_scaledobjects.yaml"
LWS_CRD = ROOT / "tests" / "data" / "crds" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"


@cache
def keda_schema() -> dict:
    crd = yaml.safe_load(KEDA_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return version["schema"]["openAPIV3Schema"]


def example(**autoscaling: object) -> dict:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["autoscaling"].update(autoscaling)
    return data


def objects(data: dict) -> list[dict]:
    spec, _ = load_text(yaml.safe_dump(data), "spec.yaml")
    return list(render(make_plan(spec)).objects)


def of_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def test_hpas_target_each_role_deployment_and_validate_strictly() -> None:
    objs = objects(example())
    hpas = of_kind(objs, "HorizontalPodAutoscaler")
    assert [h["metadata"]["labels"]["app.kubernetes.io/component"] for h in hpas] == [
        "prefill", "decode",
    ]
    deployments = {d["metadata"]["name"] for d in of_kind(objs, "Deployment")}
    for hpa in hpas:
        kubernetes_validate.validate(hpa, K8S_VERSION, strict=True)
        ref = hpa["spec"]["scaleTargetRef"]
        assert ref["kind"] == "Deployment" and ref["name"] in deployments
        (metric,) = hpa["spec"]["metrics"]
        assert metric["pods"]["metric"]["name"] == "vllm:num_requests_waiting"
        how = hpa["metadata"]["annotations"]["pdctl.io/autoscale-target"]
        assert "ms each queued request" in how
    prefill, decode = hpas
    assert (prefill["spec"]["minReplicas"], prefill["spec"]["maxReplicas"]) == (1, 6)
    assert decode["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 600


def test_targets_are_derived_from_the_capacity_plan() -> None:
    """A tighter TTFT budget tolerates fewer waiting requests; a longer prompt fewer prefill
    requests/s per instance: the targets move with the workload's SLOs."""

    def target(data: dict, role: str) -> str:
        (hpa,) = [
            h
            for h in of_kind(objects(data), "HorizontalPodAutoscaler")
            if h["metadata"]["labels"]["app.kubernetes.io/component"] == role
        ]
        return hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"]

    base = example()
    tight = example()
    tight["workload"]["ttftMs"] = 400
    assert int(target(tight, "prefill")) < int(target(base, "prefill"))
    rate = example(prefill={"maxReplicas": 6, "metric": "requestRate"})
    longer = example(prefill={"maxReplicas": 6, "metric": "requestRate"})
    longer["workload"]["promptTokens"] = 8192
    assert target(rate, "prefill").endswith("m")  # requests/s in milli-units
    assert int(target(longer, "prefill")[:-1]) < int(target(rate, "prefill")[:-1])
    written = example(decode={"maxReplicas": 5, "metric": "kvUsage", "target": 0.75})
    assert target(written, "decode") == "750m"


def test_keda_scaled_objects_validate_against_keda_crd() -> None:
    data = example(
        engine="keda", prometheus="http://prometheus-operated.monitoring:9090",
        decode={"maxReplicas": 5, "metric": "kvUsage"},
        prefill={"maxReplicas": 6, "metric": "requestRate"},
    )
    objs = objects(data)
    assert not of_kind(objs, "HorizontalPodAutoscaler")
    scalers = of_kind(objs, "ScaledObject")
    assert len(scalers) == 2
    for so in scalers:
        jsonschema.validate(so, keda_schema())
        (trigger,) = so["spec"]["triggers"]
        assert trigger["type"] == "prometheus"
        assert trigger["metadata"]["serverAddress"] == "http://prometheus-operated.monitoring:9090"
        float(trigger["metadata"]["threshold"])
    prefill, decode = scalers
    assert prefill["spec"]["triggers"][0]["metadata"]["query"] == (
        'sum(rate(vllm:request_success_total{namespace="llm-d",'
        'pod=~"qwen-autoscale-prefill-.*"}[1m]))'
    )
    assert decode["spec"]["triggers"][0]["metadata"]["query"] == (
        'sum(vllm:kv_cache_usage_perc{namespace="llm-d",pod=~"qwen-autoscale-decode-.*"})'
    )


def test_a_broken_scaled_object_fails_the_crd_schema() -> None:
    """The fixture schema is strict enough to catch a misspelt field (the test can fail)."""
    (so, _) = of_kind(objects(example(engine="keda", prometheus="http://p:9090")), "ScaledObject")
    so["spec"]["minReplicaCount"] = "one"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(so, keda_schema())


def test_multi_node_groups_scale_their_leaderworkerset() -> None:
    data = yaml.safe_load((ROOT / "examples" / "phase1-lws.yaml").read_text())
    data["autoscaling"] = {"serve": {"maxReplicas": 3, "metric": "waiting"}, "maxGpus": 48}
    (hpa,) = of_kind(objects(data), "HorizontalPodAutoscaler")
    kubernetes_validate.validate(hpa, K8S_VERSION, strict=True)
    ref = hpa["spec"]["scaleTargetRef"]
    assert ref == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "name": "llama405b-serve",
    }
    crd = yaml.safe_load(LWS_CRD.read_text())  # the scale subresource an HPA needs
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    with pytest.raises(SpecError, match="maxReplicas need 48 GPUs"):
        data["autoscaling"]["maxGpus"] = 47  # 3 groups x 2 nodes x 8 GPUs
        objects(data)


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"maxGpus": 8}, "autoscaling.maxGpus"),
        ({"prefill": {"minReplicas": 4, "maxReplicas": 2}}, "autoscaling.prefill"),
        ({"serve": {"maxReplicas": 2}}, "autoscaling.serve"), ({"engine": "keda"}, "autoscaling"),
        ({"decode": {"maxReplicas": 2, "metric": "kvUsage", "target": 5}}, "autoscaling.decode"),
        ({"decode": {"maxReplicas": 2, "metric": "queue"}}, "autoscaling.decode.metric"),
    ],
)
def test_bad_values_are_one_located_line_exit_2(change: dict, where: str, tmp_path: Path) -> None:
    spec = written(tmp_path / "spec.yaml", yaml.safe_dump(example(**change)))
    code, out, err = run_cli(["render", str(spec)])
    assert code == 2, (out, err)
    assert where in err and "Traceback" not in err, err


def test_autoscaling_on_hosts_renders_and_is_checked(tmp_path: Path) -> None:
    # `pdctl autoscale` runs the section on hosts: it renders, and its values are checked
    data = yaml.safe_load((ROOT / "examples" / "phase0-docker.yaml").read_text())
    data["autoscaling"] = {"serve": {"maxReplicas": 2, "target": 2}}
    spec = written(tmp_path / "spec.yaml", yaml.safe_dump(data))
    code, out, err = run_cli(["render", str(spec)])
    assert code == 0, (out, err)
    data["autoscaling"] = {"decode": {"maxReplicas": 2, "target": 2}}
    written(spec, yaml.safe_dump(data))
    code, _, err = run_cli(["render", str(spec)])
    assert code == 2 and "autoscaling.decode" in err and "phase 0 has no decode" in err, err


def test_explain_says_how_targets_are_derived() -> None:
    out, _ = cli(["explain", "autoscaling.decode.target"])
    text = " ".join(out.split())
    for how in ("waiting = 0.5 x", "kvUsage = planned decode batch", "requestRate = 0.8 /"):
        assert how in text, out
