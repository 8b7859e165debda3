"""Per-role scheduling and pod shape on Kubernetes: the section and each role's override
(maps merge, lists replace), strict schema validity of every field, the shapes pdctl refuses
(one line, exit 2) and the recommended labels on every object."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdctl.errors import SpecError
from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text
from tests.conftest import EXAMPLES, K8S_VERSION, ROOT
from tests.helpers import cli, data, plan_of, run_cli, written

RECOMMENDED = ("name", "instance", "component", "part-of", "version", "managed-by")


def on_kubernetes(example: Path) -> bool:
    """As plan.target_of decides by default: phase 1, or no hosts (and phase > 0)."""
    data = yaml.safe_load(example.read_text())
    if data.get("target"):
        return data["target"] == "kubernetes"
    return data.get("phase", 0) == 1 or (data.get("phase", 0) > 1 and not data.get("hosts"))


KUBE_EXAMPLES = [e for e in EXAMPLES if on_kubernetes(e)]
CLUSTER = ROOT / "tests" / "fixtures" / "gpu" / "k8s"
DATA = Path(__file__).parent / "data"

PHASE1 = """
name: m
phase: 1
model: {name: Qwen/Qwen3-8B}
kubernetes:
  namespace: ns
  storage: STORAGE
serve: {replicas: REPLICAS, tensorParallel: TP}
"""


def phase1(storage: str, replicas: int, tp: int, extra: str = "") -> str:
    """PHASE1 with `extra` lines added to its kubernetes section."""
    text = PHASE1.replace("STORAGE", storage).replace("REPLICAS", str(replicas))
    return text.replace("TP", str(tp)).replace("serve:", extra + "serve:")


PHASE3 = (DATA / "kube-roles.yaml").read_text()


def objects(text: str, **kw) -> list[dict]:
    return [d for d in yaml.safe_load_all(render(plan_of(text, **kw)).stream()) if d]


def deployment(objs: list[dict], component: str) -> dict:
    (dep,) = [
        o
        for o in objs
        if o["kind"] == "Deployment"
        and o["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    return dep


def pod(objs: list[dict], component: str) -> dict:
    return deployment(objs, component)["spec"]["template"]["spec"]


@pytest.mark.parametrize("example", KUBE_EXAMPLES, ids=lambda p: p.stem)
def test_every_object_carries_the_recommended_labels(example: Path) -> None:
    spec, _ = load_text(example.read_text(), example.name)
    assert render(make_plan(spec)).kind == "kubernetes"
    for obj in objects(example.read_text()):
        metas = [obj["metadata"]]
        if obj["kind"] == "Deployment":
            metas.append(obj["spec"]["template"]["metadata"])
        if obj["kind"] == "LeaderWorkerSet":  # multi-node instances: leader and worker pods
            lwt = obj["spec"]["leaderWorkerTemplate"]
            metas += [lwt["leaderTemplate"]["metadata"], lwt["workerTemplate"]["metadata"]]
        for meta in metas:
            labels = meta["labels"]
            missing = [k for k in RECOMMENDED if f"app.kubernetes.io/{k}" not in labels]
            assert not missing, f"{obj['kind']} {obj['metadata']['name']} lacks {missing}"
            assert labels["app.kubernetes.io/instance"] == spec.name
            assert labels["app.kubernetes.io/part-of"] == spec.name
            assert labels["app.kubernetes.io/version"] == spec.engine.version
            assert labels["app.kubernetes.io/managed-by"] == "pdctl"
    components = {
        deployment_obj["metadata"]["labels"]["app.kubernetes.io/component"]
        for deployment_obj in objects(example.read_text())
        if deployment_obj["kind"] in ("Deployment", "LeaderWorkerSet")
    }
    assert components in ({"serve"}, {"prefill", "decode", "epp"})


def test_role_settings_override_the_section() -> None:
    objs = objects(PHASE3)
    prefill, decode, epp = pod(objs, "prefill"), pod(objs, "decode"), pod(objs, "epp")
    # Maps merge key by key; lists replace.
    assert prefill["nodeSelector"] == {"pool": "h100", "zone": "a"}
    assert prefill["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "prefill", "effect": "NoSchedule"}
    ]
    vllm = prefill["containers"][0]["resources"]
    assert vllm["requests"] == {
        "cpu": "8", "memory": "128Gi", "nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100",
    }
    assert vllm["limits"]["cpu"] == "16" and vllm["limits"]["memory"] == "128Gi"
    assert decode["nodeSelector"] == {"gpu": "on", "pool": "gpu", "zone": "a"}
    assert decode["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert decode["imagePullSecrets"] == [{"name": "regcred"}]
    # The EPP takes the section's labels, annotations and pull secrets, and router.kubernetes.
    assert epp["nodeSelector"] == {"pool": "cpu"}
    assert "tolerations" not in epp
    assert epp["imagePullSecrets"] == [{"name": "regcred"}]
    assert epp["containers"][0]["resources"] == {
        "limits": {"cpu": "4", "memory": "4Gi"}, "requests": {"cpu": "2", "memory": "1Gi"},
    }
    # Labels: the section's on every object, a role's on its own objects and pods.
    for obj in objs:
        assert obj["metadata"]["labels"]["team"] == "infer"
        assert obj["metadata"]["annotations"] == {"example.com/owner": "me"}
    assert deployment(objs, "prefill")["spec"]["template"]["metadata"]["labels"]["tier"] == (
        "prefill"
    )
    assert "tier" not in deployment(objs, "decode")["spec"]["template"]["metadata"]["labels"]
    # pdctl's own pod settings stay: HAMi scheduler and the sidecar's account.
    assert decode["schedulerName"] == "hami-scheduler"
    assert decode["serviceAccountName"] == "p-routing-proxy"


FULL = (DATA / "kube-every-pod-field.yaml").read_text()


@pytest.mark.parametrize(
    ("storage", "version", "volume"),
    [
        ("{type: pvc, accessMode: ReadWriteMany}", K8S_VERSION, "persistentVolumeClaim"),
        ("{type: hostPath, path: /data/hf}", K8S_VERSION, "hostPath"),
        ("{type: nfs, server: nfs.example, path: /export/hf}", K8S_VERSION, "nfs"),
        ("{type: emptyDir, size: 80Gi}", K8S_VERSION, "emptyDir"),
        ("{type: image, reference: registry.example/weights/qwen3:1}", "1.31.0", "image"),
    ],
)
def test_every_pod_field_passes_strict_validation(storage: str, version: str, volume: str) -> None:
    objs = objects(FULL.replace("{storage}", storage))
    for obj in objs:
        kubernetes_validate.validate(obj, version, strict=True)
    spec = pod(objs, "serve")
    assert spec["priorityClassName"] == "gpu-high"
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["serviceAccountName"] == "engine"
    assert spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    spread = spec["topologySpreadConstraints"][0]
    assert spread["labelSelector"] == {
        "matchLabels": {
            "app.kubernetes.io/instance": "full", "app.kubernetes.io/component": "serve",
        }
    }
    cache = next(v for v in spec["volumes"] if v["name"] == "model-cache")
    assert volume in cache
    (vllm,) = spec["containers"]
    assert vllm["resources"]["requests"]["ephemeral-storage"] == "50Gi"
    assert vllm["resources"]["limits"]["memory"] == "40Gi"
    assert [e["name"] for e in vllm["env"]][-2:] == ["S3_KEY", "LOG_LEVEL"]
    assert vllm["envFrom"][0] == {"configMapRef": {"name": "vllm-tuning"}, "prefix": "TUNE_"}
    assert {"name": "scratch", "emptyDir": {}} in spec["volumes"]
    mounts = {m["name"]: m for m in vllm["volumeMounts"]}
    assert mounts["templates"]["readOnly"] is True
    assert mounts["model-cache"].get("readOnly", False) is (volume == "image")
    meta = deployment(objs, "serve")["spec"]["template"]["metadata"]
    assert meta["labels"]["sidecar.istio.io/inject"] == "false"
    assert meta["annotations"] == {"prometheus.io/scrape": "true"}


def test_role_settings_render_deterministically() -> None:
    assert objects(PHASE3) == objects(PHASE3)
    spec, _ = load_text(PHASE3, "spec.yaml")
    assert render(make_plan(spec)).stream() == render(make_plan(spec)).stream()


def refusal(text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    path = written(tmp_path / "spec.yaml", text)
    out, err = cli(["render", str(path), *extra], 2)
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err.strip()


def test_the_old_flagship_example_is_refused(tmp_path: Path, capsys) -> None:
    """examples/phase1-k8s.yaml before: 2 replicas on the default ReadWriteOnce PVC."""
    text = (ROOT / "examples" / "phase1-k8s.yaml").read_text()
    old = text.replace("accessMode: ReadWriteMany", "accessMode: ReadWriteOnce")
    assert old != text
    line = refusal(old, tmp_path, capsys)
    assert line.startswith(f"error: {tmp_path / 'spec.yaml'}:")
    assert "kubernetes.storage.accessMode: 2 pods (2 serve) mount the PVC ReadWriteOnce" in line
    assert "ReadWriteMany" in line and "emptyDir or hostPath" in line and "..." not in line


@pytest.mark.parametrize(
    ("storage", "replicas", "refused"),
    [
        ("{type: pvc}", 2, True), ("{type: pvc}", 1, False),
        ("{type: existingClaim, claimName: models}", 3, True),
        ("{type: existingClaim, claimName: models, accessMode: ReadWriteMany}", 3, False),
        ("{type: pvc, accessMode: ReadWriteMany}", 2, False), ("{type: emptyDir}", 2, False),
        ("{type: hostPath, path: /data/hf}", 2, False),
    ],
)
def test_read_write_once_with_several_pods(storage: str, replicas: int, refused: bool) -> None:
    text = phase1(storage, replicas, 1)
    if refused:
        with pytest.raises(SpecError, match="ReadWriteOnce"):
            plan_of(text)
    else:
        plan_of(text)


def test_read_write_once_pinned_to_one_node_renders() -> None:
    pinned = phase1("{type: pvc}", 2, 1, "  nodeSelector: {kubernetes.io/hostname: gpu-a}\n")
    objs = objects(pinned.replace("serve: {", "serve: {kubernetes: {labels: {x: y}}, "))
    assert pod(objs, "serve")["nodeSelector"] == {"kubernetes.io/hostname": "gpu-a"}
    # A pin by required node affinity counts too; two different nodes do not.
    affinity = (
        "  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
        "{nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, "
        "operator: In, values: [%s]}]}]}}}\n"
    )
    plan_of(phase1("{type: pvc}", 2, 1, affinity % "gpu-a"))
    with pytest.raises(SpecError, match="no node pin holds them"):
        plan_of(phase1("{type: pvc}", 2, 1, affinity % "gpu-a, gpu-b"))


def test_a_default_access_mode_is_named_so() -> None:
    with pytest.raises(SpecError, match=r"mount the PVC ReadWriteOnce \(the default\), "):
        plan_of(phase1("{type: pvc}", 2, 1))
    with pytest.raises(SpecError, match=r"mount the PVC ReadWriteOnce, "):
        plan_of(phase1("{type: pvc, accessMode: ReadWriteOnce}", 2, 1))


def test_prefill_and_decode_count_together_on_one_claim() -> None:
    text = PHASE3.replace("accessMode: ReadWriteMany", "accessMode: ReadWriteOnce")
    with pytest.raises(SpecError, match=r"4 pods \(2 prefill \+ 2 decode\)"):
        plan_of(text)


def test_gpus_beyond_the_largest_node_are_refused(tmp_path: Path, capsys) -> None:
    """The recorded cluster's largest node has 20 allocatable nvidia.com/gpu (gpu-a)."""
    text = phase1("{type: emptyDir}", 1, 32)
    line = refusal(text, tmp_path, capsys, "--facts", str(CLUSTER))
    assert "serve.tensorParallel: a serve pod asks for 32 nvidia.com/gpu" in line
    assert "the recorded cluster's largest node, gpu-a, has 20" in line
    # Without the recording nothing is known, so nothing is refused; within bounds it renders.
    path = tmp_path / "spec.yaml"
    assert run_cli(["render", str(path)], capsys)[0] == 0
    path.write_text(phase1("{type: emptyDir}", 1, 8))
    assert run_cli(["render", str(path), "--facts", str(CLUSTER)], capsys)[0] == 0


BAD = [(c["id"], c["line"], c["phrase"]) for c in data("refusals.yaml")["pod"]]


@pytest.mark.parametrize(("case", "line", "phrase"), BAD, ids=[b[0] for b in BAD])
def test_bad_pod_settings_are_one_line(case: str, line: str, phrase: str, tmp_path, capsys) -> None:
    text = phase1("{type: emptyDir}", 1, 1, line + "\n")
    if "storage:" in line:
        text = text.replace("  storage: {type: emptyDir}\n", "")
    err = refusal(text, tmp_path, capsys)
    assert f"{tmp_path / 'spec.yaml'}:" in err and phrase in err


def test_a_role_limit_below_its_request_names_the_role(tmp_path: Path, capsys) -> None:
    text = PHASE3.replace('limits: {cpu: "16"}', "limits: {cpu: 7500m}")
    err = refusal(text, tmp_path, capsys)
    assert "prefill.kubernetes.resources.limits.cpu: limit 7500m is below the request 8" in err


def test_decode_keeps_the_sidecars_service_account(tmp_path: Path, capsys) -> None:
    text = PHASE3.replace(
        'kubernetes: {nodeSelector: {gpu: "on"}}', "kubernetes: {serviceAccountName: x}"
    )
    err = refusal(text, tmp_path, capsys)
    assert "decode.kubernetes.serviceAccountName" in err


def test_the_sections_account_is_for_serve_and_prefill() -> None:
    objs = objects(PHASE3.replace("  imagePullSecrets: [regcred]", "  serviceAccountName: engines"))
    assert pod(objs, "prefill")["serviceAccountName"] == "engines"
    assert pod(objs, "decode")["serviceAccountName"] == "p-routing-proxy"
    assert pod(objs, "epp")["serviceAccountName"] == "p-epp"


def test_image_volume_needs_a_model_path_inside_it(tmp_path: Path, capsys) -> None:
    text = FULL.replace("{storage}", "{type: image, reference: r.example/w:1}").replace(
        "/models/qwen3", "Qwen/Qwen3-8B"
    )
    err = refusal(text, tmp_path, capsys)
    assert "model.name" in err and "/models/<model>" in err


def _block(doc: str, after: str) -> str:
    """The fenced block that follows `after` in a docs page."""
    text = (ROOT / "docs" / doc).read_text()
    assert after in text, f"{doc} lost the paragraph {after!r}"
    rest = text.split(after, 1)[1]
    return rest.split("```", 2)[1].split("\n", 1)[1]


def _stream(example: str) -> str:
    path = ROOT / "examples" / example
    return render(make_plan(load_text(path.read_text(), path.name)[0])).stream()


def test_docs_show_what_render_prints() -> None:
    stream = _stream("phase1-k8s.yaml")
    block = _block("phase1-kubernetes.md", "`pdctl render examples/phase1-k8s.yaml` (excerpts")
    for part in block.split("...\n"):
        assert part in stream, part
    excerpt = []
    for obj in yaml.safe_load_all(_stream("phase3-hami-pools.yaml")):
        if obj and obj["kind"] == "Deployment":
            template = obj["spec"]["template"]
            keys = ("schedulerName", "nodeSelector", "tolerations", "topologySpreadConstraints")
            spec = {k: template["spec"][k] for k in keys if k in template["spec"]}
            spec["containers[0].resources"] = template["spec"]["containers"][0]["resources"]
            shown = {"metadata": template["metadata"], "spec": spec}
            excerpt.append(
                f"# {obj['metadata']['name']}\n" + yaml.safe_dump(shown, sort_keys=False)
            )
    block = _block("phase2-kubernetes.md", "the vLLM or EPP container's resources)")
    assert block == "\n".join(excerpt)


def test_docs_show_the_refusals_pdctl_prints(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "examples" / "phase1-k8s.yaml").read_text()
    Path("spec.yaml").write_text(text.replace("ReadWriteMany", "ReadWriteOnce"))
    big = text.replace("tensorParallel: 1", "tensorParallel: 32")
    Path("big.yaml").write_text(big)
    shown = [
        _block("phase1-kubernetes.md", "With `accessMode: ReadWriteOnce` in"),
        _block("phase1-kubernetes.md", "allocatable is refused too"),
    ]
    for block, extra in zip(shown, ([], ["--facts", str(CLUSTER)]), strict=True):
        command, line = block.strip().split("\n")
        argv = command.removeprefix("$ pdctl ").split()[:2]
        assert run_cli([*argv, *extra], capsys)[2].strip() == line


KEYS = st.sampled_from(["pool", "zone", "example.com/tier", "gpu", "a.b/c"])
VALUES = st.sampled_from(["a", "b", "h100", "on", "x-1"])
TOLERATIONS = st.lists(
    st.fixed_dictionaries({"key": KEYS, "operator": st.just("Exists")}), max_size=2
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.dictionaries(KEYS, VALUES, max_size=3),
    role=st.one_of(st.none(), st.dictionaries(KEYS, VALUES, max_size=3)), base_tol=TOLERATIONS,
    role_tol=st.one_of(st.none(), TOLERATIONS),
)
def test_maps_merge_and_lists_replace(base, role, base_tol, role_tol) -> None:
    data = yaml.safe_load(PHASE3)
    data["kubernetes"].update(nodeSelector=base, tolerations=base_tol)
    over: dict = {}
    if role is not None:
        over["nodeSelector"] = role
    if role_tol is not None:
        over["tolerations"] = role_tol
    data["prefill"]["kubernetes"] = over
    data["decode"].pop("kubernetes")
    objs = objects(yaml.safe_dump(data))
    prefill, decode = pod(objs, "prefill"), pod(objs, "decode")
    want = {**base, **(role or {})}
    assert prefill.get("nodeSelector", {}) == dict(sorted(want.items()))
    assert decode.get("nodeSelector", {}) == dict(sorted(base.items()))
    tolerations = base_tol if role_tol is None else role_tol
    assert prefill.get("tolerations", []) == tolerations
    assert decode.get("tolerations", []) == base_tol
