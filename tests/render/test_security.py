"""Kubernetes security posture: the decode sidecar's SSRF protection and its RBAC, the EPP's
metrics auth, hardened containers, API tokens only where needed, Pod Security "baseline" for
every rendered pod, and the optional NetworkPolicies. Interfaces of llm-d-router v0.10.0 come
from tests/render/data/llmd_v0.10.0.json (extracted from its tag)."""

from __future__ import annotations

import copy
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
from tests.conftest import EXAMPLES, K8S_VERSION
from tests.helpers import run_cli, written
from tests.render.check import check_kube_docs, check_transports, llmd_facts, rdma_resources
from tests.render.pod_security import (
    all_containers,
    baseline_violations,
    hardening_violations,
    pod_templates,
)
from tests.render.test_pd_properties import expected_error, pd_specs
from tests.render.test_properties import spec_dict

LLMD_EXAMPLES = [Path("examples/phase2-llmd.yaml"), Path("examples/phase3-hami.yaml")]


def _on_kubernetes(path: Path) -> bool:
    spec = yaml.safe_load(path.read_text())
    on_hosts = spec["phase"] == 3 and spec.get("hosts")  # phase 3 on hosts: HAMi-core alone
    return (spec["phase"] in (1, 3) and not on_hosts) or spec.get("target") == "kubernetes"


K8S_EXAMPLES = [p for p in EXAMPLES if _on_kubernetes(p)]
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def docs_of(text: str, phase: int | None = None, target: str | None = None) -> list[dict]:
    spec, _ = load_text(text, "spec.yaml")
    bundle = render(make_plan(spec, phase=phase, target=target))
    assert bundle.kind == "kubernetes"
    return [d for d in yaml.safe_load_all(bundle.stream()) if d]


def example_docs(path: Path, **kubernetes: object) -> list[dict]:
    spec = yaml.safe_load(path.read_text())
    spec.setdefault("kubernetes", {}).update(kubernetes)
    return docs_of(yaml.safe_dump(spec))


def one(docs: list[dict], kind: str, suffix: str = "") -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    return doc


def pod_of(docs: list[dict], suffix: str) -> dict:
    return one(docs, "Deployment", suffix)["spec"]["template"]["spec"]


def sidecar_of(docs: list[dict]) -> dict:
    (c,) = [c for c in pod_of(docs, "-decode")["initContainers"] if c["name"] == "routing-proxy"]
    return c


def flags(args: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in args if a.startswith("--"))


def grants(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(group in r.get("apiGroups", []) and resource in r.get("resources", [])
               and verb in r["verbs"] for r in rules)


def rules_bound_to(docs: list[dict], account: str, namespace: str, kind: str) -> list[dict]:
    """The rules of every Role (kind Role) or ClusterRole a rendered binding gives `account`."""
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}
    out: list[dict] = []
    for b in docs:
        if b["kind"] != f"{kind}Binding":
            continue
        subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
        if subject in b["subjects"] and b["roleRef"]["kind"] == kind:
            out += roles[b["roleRef"]["name"]]["rules"]
    return out


def check_all(docs: list[dict]) -> None:
    """Strict schemas (NetworkPolicy too, core networking.k8s.io/v1), the pinned llm-d checks,
    baseline and pdctl's hardening for every pod template."""
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    for doc in policies:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    check_kube_docs([d for d in docs if d["kind"] != "NetworkPolicy"])
    for name, pod, notes in pod_templates(docs):
        base, hardening = rdma_exception(pod, notes)
        assert baseline_violations(pod, notes) == base, name
        assert hardening_violations(pod) == hardening, name


def rdma_exception(pod: dict, notes: dict) -> tuple[list[str], list[str]]:
    """What baseline and hardening report for a pod with RDMA (kubernetes.rdma: a device
    plugin's resource or a Multus network): IPC_LOCK on the vLLM container, nothing else
    (docs/security.md); nothing for any other pod."""
    rdma = any(rdma_resources(c) for c in pod["containers"] if c["name"] == "vllm")
    if not rdma and "k8s.v1.cni.cncf.io/networks" not in notes:
        return [], []
    return ["container vllm: capability IPC_LOCK"], ["container vllm: capabilities added"]


# 1. SSRF protection ---------------------------------------------------------------------------
@pytest.mark.parametrize("example", LLMD_EXAMPLES, ids=lambda p: p.stem)
def test_sidecar_refuses_prefill_targets_outside_its_pool(example: Path) -> None:
    docs = example_docs(example)
    facts = llmd_facts()
    ssrf = facts["sidecar_ssrf"]
    args = flags(sidecar_of(docs)["args"])
    assert args[ssrf["flag"]] == "true"
    for companion in ssrf["requires_flags"]:
        assert companion in args
    pool = one(docs, "InferencePool")
    assert args["inference-pool"] == f"{pool['metadata']['namespace']}/{pool['metadata']['name']}"
    group, version = pool["apiVersion"].split("/")
    assert args["pool-group"] == group and ssrf["pool_groups"][group] == version
    usable = set(facts["sidecar_flags"]) - set(facts["sidecar_deprecated_flags"])
    assert set(args) <= usable


@pytest.mark.parametrize("example", LLMD_EXAMPLES, ids=lambda p: p.stem)
def test_sidecar_account_may_read_the_pool_and_its_pods_and_nothing_else(example: Path) -> None:
    docs = example_docs(example)
    pod = pod_of(docs, "-decode")
    account = pod["serviceAccountName"]
    ns = one(docs, "InferencePool")["metadata"]["namespace"]
    assert one(docs, "ServiceAccount", account)["metadata"]["namespace"] == ns
    rules = rules_bound_to(docs, account, ns, "Role")
    reads = llmd_facts()["sidecar_ssrf"]["api_reads"]
    for read in reads:
        for verb in read["verbs"]:
            assert grants(rules, read["apiGroup"], read["resource"], verb), read
    needed = {(r["apiGroup"], r["resource"], v) for r in reads for v in r["verbs"]}
    granted = {(g, res, v) for r in rules for g in r["apiGroups"] for res in r["resources"]
               for v in r["verbs"]}
    assert granted == needed
    assert rules_bound_to(docs, account, ns, "ClusterRole") == []


@pytest.mark.parametrize("example", LLMD_EXAMPLES, ids=lambda p: p.stem)
def test_api_token_reaches_the_sidecar_alone(example: Path) -> None:
    docs = example_docs(example)
    pod = pod_of(docs, "-decode")
    assert pod["automountServiceAccountToken"] is False
    (vol,) = [v for v in pod["volumes"] if "projected" in v]
    sources = vol["projected"]["sources"]
    assert any("serviceAccountToken" in s for s in sources)
    assert {"key": "ca.crt", "path": "ca.crt"} in next(
        s["configMap"]["items"] for s in sources if "configMap" in s
    )
    for c in all_containers(pod):
        mounts = [m for m in c.get("volumeMounts", []) if m["name"] == vol["name"]]
        if c["name"] == "routing-proxy":
            assert mounts == [{"name": vol["name"], "mountPath": TOKEN_DIR, "readOnly": True}]
        else:
            assert mounts == [], c["name"]
    assert pod_of(docs, "-prefill")["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod_of(docs, "-prefill")


# 2. EPP metrics auth --------------------------------------------------------------------------
@pytest.mark.parametrize("example", LLMD_EXAMPLES, ids=lambda p: p.stem)
def test_epp_metrics_need_an_authorized_token(example: Path) -> None:
    docs = example_docs(example)
    auth = llmd_facts()["epp_metrics_auth"]
    epp = pod_of(docs, "-epp")
    (container,) = epp["containers"]
    assert flags(container["args"])[auth["flag"]] == "true"
    assert epp["automountServiceAccountToken"] is True
    ns = one(docs, "InferencePool")["metadata"]["namespace"]
    rules = rules_bound_to(docs, epp["serviceAccountName"], ns, "ClusterRole")
    for rule in auth["cluster_rules"]:
        for verb in rule["verbs"]:
            assert grants(rules, rule["apiGroup"], rule["resource"], verb), rule
    readers = [d for d in docs if d["kind"] == "ClusterRole" and auth["scraper_rule"] in d["rules"]]
    assert len(readers) == 1 and len(readers[0]["rules"]) == 1
    for d in docs:
        if d["kind"].startswith("Cluster"):
            assert "namespace" not in d["metadata"]
            assert d["metadata"]["name"].startswith(f"{ns}.")  # cluster-wide: <ns>.<name>.<role>


# 3. Pod Security baseline and hardening --------------------------------------------------------
def test_kubernetes_examples_are_all_found() -> None:
    assert [p.stem for p in K8S_EXAMPLES] == [
        "phase1-k8s", "phase1-lws", "phase2-k8s-autoscale", "phase2-llmd", "phase3-hami-pools",
        "phase3-hami",
    ]


def every_pod_template(docs: list[dict]) -> list[tuple[str, dict, dict]]:
    """pod_templates plus the leader and worker templates of every LeaderWorkerSet."""
    out = pod_templates(docs)
    for doc in docs:
        if doc["kind"] == "LeaderWorkerSet":
            group = doc["spec"]["leaderWorkerTemplate"]
            for key in ("leaderTemplate", "workerTemplate"):
                tpl = group[key]
                name = f"{doc['metadata']['name']}/{key}"
                out.append((name, tpl["spec"], tpl.get("metadata", {}).get("annotations", {})))
    return out


# phase2-wide-ep runs on hosts by default; its Kubernetes shape (LWS per role) is checked too.
KUBE_RENDERS = [(p, None) for p in K8S_EXAMPLES] + [
    (Path("examples/phase2-wide-ep.yaml"), "kubernetes")
]


@pytest.mark.parametrize(("example", "target"), KUBE_RENDERS, ids=lambda v: getattr(v, "stem", v))
def test_every_kubernetes_pod_passes_baseline_and_hardening(
    example: Path, target: str | None
) -> None:
    docs = docs_of(example.read_text(), target=target)
    templates = every_pod_template(docs)
    assert templates
    kinds = {d["kind"] for d in docs}
    if "LeaderWorkerSet" in kinds:  # every LWS contributes its leader and worker template
        lws = [d for d in docs if d["kind"] == "LeaderWorkerSet"]
        assert len([n for n, _, _ in templates if "/" in n]) == 2 * len(lws)
    for name, pod, notes in templates:
        # RDMA (kubernetes.rdma) adds IPC_LOCK to vLLM alone, which takes the pod out of
        # baseline (docs/security.md): that one capability, nothing else.
        base, hardening = rdma_exception(pod, notes)
        assert baseline_violations(pod, notes) == base, name
        assert hardening_violations(pod) == hardening, name
        for c in all_containers(pod):
            if c["image"].startswith("ghcr.io/llm-d/"):  # images that run as user 65532
                assert c["securityContext"]["runAsNonRoot"] is True, c["name"]
    check_transports(docs)


def _decode_pod() -> tuple[dict, dict]:
    docs = example_docs(LLMD_EXAMPLES[1])
    dep = one(docs, "Deployment", "-decode")
    return copy.deepcopy(dep["spec"]["template"]["spec"]), {}


BASELINE_BREAKS = {
    "hostNetwork": lambda p, a: p.update(hostNetwork=True),
    "hostPID": lambda p, a: p.update(hostPID=True),
    "hostIPC": lambda p, a: p.update(hostIPC=True),
    "privileged": lambda p, a: p["containers"][0]["securityContext"].update(privileged=True),
    "capability": lambda p, a: p["initContainers"][0]["securityContext"].update(
        capabilities={"add": ["NET_ADMIN"]}
    ),
    "hostPath": lambda p, a: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
    "hostPort": lambda p, a: p["containers"][0]["ports"][0].update(hostPort=8200),
    "apparmor": lambda p, a: a.update(
        {"container.apparmor.security.beta.kubernetes.io/vllm": "unconfined"}
    ),
    "apparmor field": lambda p, a: p.update(
        securityContext={"appArmorProfile": {"type": "Unconfined"}}
    ),
    "selinux type": lambda p, a: p.update(securityContext={"seLinuxOptions": {"type": "spc_t"}}),
    "selinux user": lambda p, a: p["containers"][0]["securityContext"].update(
        seLinuxOptions={"user": "system_u"}
    ),
    "procMount": lambda p, a: p["containers"][0]["securityContext"].update(procMount="Unmasked"),
    "seccomp": lambda p, a: p["containers"][0]["securityContext"].update(
        seccompProfile={"type": "Unconfined"}
    ),
    "sysctl": lambda p, a: p.update(
        securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}
    ),
    "hostProcess": lambda p, a: p.update(securityContext={"windowsOptions": {"hostProcess": True}}),
}


@pytest.mark.parametrize("rule", sorted(BASELINE_BREAKS))
def test_baseline_check_catches_each_rule(rule: str) -> None:
    pod, annotations = _decode_pod()
    assert baseline_violations(pod, annotations) == []
    BASELINE_BREAKS[rule](pod, annotations)
    assert baseline_violations(pod, annotations)


HARDENING_BREAKS = {
    "no securityContext": lambda p: p["containers"][0].pop("securityContext"),
    "escalation": lambda p: p["initContainers"][0]["securityContext"].pop(
        "allowPrivilegeEscalation"
    ),
    "capabilities kept": lambda p: p["containers"][0]["securityContext"].pop("capabilities"),
    "seccomp unset": lambda p: p["containers"][0]["securityContext"].pop("seccompProfile"),
    "token mounted": lambda p: p.pop("automountServiceAccountToken"),
    "default account": lambda p: p.pop("serviceAccountName"),
}


@pytest.mark.parametrize("rule", sorted(HARDENING_BREAKS))
def test_hardening_check_catches_each_rule(rule: str) -> None:
    pod, _ = _decode_pod()
    assert hardening_violations(pod) == []
    HARDENING_BREAKS[rule](pod)
    assert hardening_violations(pod)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=pd_specs(), phase=st.sampled_from([2, 3]), policy=st.booleans())
def test_generated_llmd_specs_pass_baseline(spec: dict, phase: int, policy: bool) -> None:
    spec["kubernetes"]["networkPolicy"] = policy
    spec["router"] = {"gateway": "gw"}
    target = "kubernetes"
    loaded, _ = load_text(yaml.safe_dump(spec), "gen.yaml")
    try:
        bundle = render(make_plan(loaded, phase=phase, target=target))
    except SpecError as err:
        assert expected_error(spec, phase, "kubernetes", err), err.line()
        return
    docs = [d for d in yaml.safe_load_all(bundle.stream()) if d]
    assert any(d["kind"] == "NetworkPolicy" for d in docs) == policy
    check_all(docs)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=spec_dict())
def test_generated_phase1_specs_pass_baseline(d: dict) -> None:
    d["phase"] = 1
    d.pop("hosts")
    d.setdefault("kubernetes", {})["networkPolicy"] = True  # a no-op in phase 1
    # several replicas share the model cache: a ReadWriteOnce claim would be refused
    d["kubernetes"].setdefault("storage", {})["accessMode"] = "ReadWriteMany"
    docs = docs_of(yaml.safe_dump(d))
    assert not [doc for doc in docs if doc["kind"] == "NetworkPolicy"]
    templates = pod_templates(docs)
    assert templates
    for name, pod, notes in templates:
        assert baseline_violations(pod, notes) == [], name
        assert hardening_violations(pod) == [], name


# 4. NetworkPolicy -------------------------------------------------------------------------------
def matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def pod_labels(docs: list[dict], suffix: str) -> dict:
    return one(docs, "Deployment", suffix)["spec"]["template"]["metadata"]["labels"]


def allowed(policy: dict, labels: dict, namespace: str, port: int, own_ns: str) -> bool:
    """Would `policy` let a pod with `labels` in `namespace` reach `port`?"""
    for rule in policy["spec"]["ingress"]:
        ports = [p["port"] for p in rule.get("ports", [])]
        if ports and port not in ports:
            continue
        if "from" not in rule:
            return True  # every source
        for peer in rule["from"]:
            ns_sel = peer.get("namespaceSelector")
            ns_ok = (
                matches(ns_sel, {"kubernetes.io/metadata.name": namespace})
                if ns_sel is not None
                else namespace == own_ns
            )
            if ns_ok and matches(peer["podSelector"], labels):
                return True
    return False


@pytest.mark.parametrize("example", LLMD_EXAMPLES, ids=lambda p: p.stem)
def test_network_policy_admits_only_gateway_epp_and_pool(example: Path) -> None:
    docs = example_docs(example, networkPolicy=True)
    check_all(docs)
    ns = one(docs, "InferencePool")["metadata"]["namespace"]
    decode = one(docs, "NetworkPolicy", "-decode")
    prefill = one(docs, "NetworkPolicy", "-prefill")
    assert matches(decode["spec"]["podSelector"], pod_labels(docs, "-decode"))
    assert not matches(decode["spec"]["podSelector"], pod_labels(docs, "-prefill"))
    assert matches(prefill["spec"]["podSelector"], pod_labels(docs, "-prefill"))
    gateway = {"gateway.networking.k8s.io/gateway-name": "llm-d-inference-gateway"}
    epp = pod_labels(docs, "-epp")
    stranger = {"app": "curl"}
    assert allowed(decode, gateway, ns, 8000, ns)
    assert allowed(decode, epp, ns, 8000, ns)  # it scrapes metrics on the pool's target port
    assert not allowed(decode, gateway, ns, 8200, ns)
    assert not allowed(decode, epp, ns, 8200, ns)
    assert not allowed(decode, stranger, ns, 8000, ns)
    assert not allowed(decode, gateway, "other", 8000, ns)
    assert allowed(decode, pod_labels(docs, "-prefill"), ns, 5600, ns)  # NIXL
    assert allowed(prefill, pod_labels(docs, "-decode"), ns, 8000, ns)  # the sidecar's prefill
    assert allowed(prefill, epp, ns, 8000, ns)
    assert not allowed(prefill, gateway, ns, 8000, ns)
    assert not allowed(prefill, stranger, ns, 5600, ns)
    picker = one(docs, "NetworkPolicy", "-epp")
    assert matches(picker["spec"]["podSelector"], epp)
    assert allowed(picker, gateway, ns, 9002, ns)
    assert not allowed(picker, stranger, ns, 9002, ns)
    assert allowed(picker, stranger, "monitoring", 9090, ns)  # a token is checked instead


def test_network_policy_gateway_peer_is_configurable() -> None:
    docs = example_docs(
        LLMD_EXAMPLES[0], networkPolicy=True, gatewayNamespace="envoy-gateway-system",
        gatewayPodLabels={"gateway.envoyproxy.io/owning-gateway-name": "gw"},
    )
    check_all(docs)
    decode = one(docs, "NetworkPolicy", "-decode")
    envoy = {"gateway.envoyproxy.io/owning-gateway-name": "gw"}
    assert allowed(decode, envoy, "envoy-gateway-system", 8000, "llm-d")
    assert not allowed(decode, envoy, "llm-d", 8000, "llm-d")


def test_network_policy_off_by_default_and_never_in_phase_1() -> None:
    assert not [d for d in example_docs(LLMD_EXAMPLES[0]) if d["kind"] == "NetworkPolicy"]
    docs = example_docs(Path("examples/phase1-k8s.yaml"), networkPolicy=True)
    assert not [d for d in docs if d["kind"] == "NetworkPolicy"]


def test_network_policy_without_a_gateway_is_a_spec_error(tmp_path: Path, capsys) -> None:
    spec = yaml.safe_load(LLMD_EXAMPLES[0].read_text())
    spec["kubernetes"]["networkPolicy"] = True
    del spec["router"]
    path = written(tmp_path / "spec.yaml", yaml.safe_dump(spec, sort_keys=False))
    code, out, err = run_cli(["render", str(path)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert "kubernetes.networkPolicy" in err and "router.gateway" in err
    assert "gatewayPodLabels" in err


def test_gateway_name_that_is_no_label_value_needs_explicit_labels() -> None:
    spec = yaml.safe_load(LLMD_EXAMPLES[0].read_text())
    spec["kubernetes"]["networkPolicy"] = True
    spec["router"]["gateway"] = "g." + "x" * 70
    loaded, _ = load_text(yaml.safe_dump(spec), "spec.yaml")
    with pytest.raises(SpecError) as err:
        make_plan(loaded)
    assert err.value.path == "kubernetes.gatewayPodLabels"
