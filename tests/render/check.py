"""Checks shared by the PD tests: emitted vLLM flags, KV keys, router flags, Kubernetes
objects (strict core validation, InferencePool against its real CRD schema)."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

from pdctl.plan import Plan
from tests.conftest import K8S_VERSION, ROOT

DATA = Path(__file__).parent / "data"
CRDS = ROOT / "tests" / "data" / "crds"
CORE_GROUPS = ("v1", "apps/", "rbac.authorization.k8s.io/", "batch/", "policy/", "autoscaling/")


@cache
def router_flags() -> frozenset[str]:
    """Every long option in vllm-router 0.1.17's --help (tests/render/data/vllm_router_help.txt)."""
    text = (DATA / "vllm_router_help.txt").read_text()
    return frozenset(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))


@cache
def llmd_facts() -> dict:
    """Interfaces of the pinned llm-d-router (v0.10.0), extracted from its tag."""
    return json.loads((DATA / "llmd_v0.10.0.json").read_text())


def _flag_names(args: list[str]) -> list[str]:
    return [a[2:].split("=", 1)[0] for a in args if a.startswith("--")]


def check_llmd(docs: list[dict]) -> None:
    """Sidecar and EPP flags exist (and are not deprecated) at the pinned llm-d-router; the EPP
    config names only registered plugin types; probes and Service match the EPP's servers."""
    facts = llmd_facts()
    sidecar_ok = set(facts["sidecar_flags"]) - set(facts["sidecar_deprecated_flags"])
    epp_ok = set(facts["epp_flags"]) - set(facts["epp_deprecated_flags"])
    for doc in docs:
        if doc["kind"] == "Deployment":
            pod = doc["spec"]["template"]["spec"]
            for c in pod.get("initContainers", []):
                if c["name"] == "routing-proxy":
                    for flag in _flag_names(c["args"]):
                        assert flag in sidecar_ok, f"sidecar flag --{flag} (pinned llm-d-router)"
            for c in pod["containers"]:
                if c["name"] == "epp":
                    for flag in _flag_names(c["args"]):
                        assert flag in epp_ok, f"EPP flag --{flag} (pinned llm-d-router)"
                    for probe in ("readinessProbe", "livenessProbe"):
                        service = c[probe]["grpc"]["service"]
                        assert service in facts["epp_grpc_health_services"], service
        elif doc["kind"] == "ConfigMap" and "epp-config.yaml" in doc.get("data", {}):
            config = yaml.safe_load(doc["data"]["epp-config.yaml"])
            assert config["apiVersion"] in facts["epp_config_api_versions"]
            for plugin in config["plugins"]:
                assert plugin["type"] in facts["plugin_types"], plugin["type"]
        elif doc["kind"] == "Service" and doc["metadata"]["name"].endswith("-epp"):
            (ext,) = [p for p in doc["spec"]["ports"] if p["name"] == "grpc-ext-proc"]
            assert ext["appProtocol"] == facts["epp_ext_proc_app_protocol"]


@cache
def crd_schema(kind: str, version: str) -> dict:
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["kind"] == kind:
            for v in crd["spec"]["versions"]:
                if v["name"] == version:
                    return v["schema"]["openAPIV3Schema"]
    raise LookupError(f"no CRD schema for {kind} {version} in {CRDS}")


def kv_documents(args: tuple[str, ...]) -> list[dict]:
    return [json.loads(args[i + 1]) for i, a in enumerate(args) if a == "--kv-transfer-config"]


def all_kv_keys(doc: dict) -> set[str]:
    keys = set(doc)
    for nested in doc.get("kv_connector_extra_config", {}).get("connectors", []):
        keys |= all_kv_keys(nested)
    return keys


def check_engine_flags(plan: Plan) -> None:
    """Every `vllm serve` flag and every kv-transfer-config key exists for the pinned version."""
    rel = plan.release
    for inst in plan.instances:
        for arg in inst.args:
            if arg.startswith("--"):
                assert rel.has_flag(arg), f"{inst.name}: {arg} not in vLLM {rel.version} flags"
        docs = kv_documents(inst.args)
        assert len(docs) == 1, inst.args
        for key in all_kv_keys(docs[0]):
            assert key in rel.kv_keys, f"{inst.name}: kv key {key} not in vLLM {rel.version}"
        assert docs[0]["kv_connector"] in rel.connectors


def check_router_flags(plan: Plan) -> None:
    known = router_flags()
    for svc in plan.services:
        if svc.role != "router":
            continue
        command = svc.command
        if command[:2] == ("python3", "router_watch.py"):  # Mooncake: under the router watch
            watch = command[2:command.index("--")]
            assert watch[::2] == ("--bootstrap",) * (len(watch) // 2) and len(watch) % 2 == 0
            command = command[command.index("--") + 1:]
        assert command[0] == "vllm-router"
        for arg in command:
            if arg.startswith("--"):
                assert arg in known, f"{arg} is not a vllm-router 0.1.17 flag"


def check_inference_pool(doc: dict) -> None:
    schema = crd_schema("InferencePool", doc["apiVersion"].split("/")[1])
    jsonschema.validate(doc, schema)
    ref = doc["spec"]["endpointPickerRef"]
    # The CRD's CEL rule (jsonschema cannot run CEL): a Service reference needs a port.
    assert ref.get("kind", "Service") != "Service" or "port" in ref


def check_http_route(doc: dict) -> None:
    """HTTPRoute against Gateway API v1.6.1's CRD (standard channel), plus what pdctl means."""
    assert doc["apiVersion"] == "gateway.networking.k8s.io/v1"
    jsonschema.validate(doc, crd_schema("HTTPRoute", "v1"))
    assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(doc["spec"]) <= {"parentRefs", "hostnames", "rules"}
    for parent in doc["spec"]["parentRefs"]:
        assert parent["kind"] == "Gateway" and parent["name"]
    for rule in doc["spec"]["rules"]:
        assert set(rule) <= {"matches", "backendRefs", "filters", "timeouts"}
        for backend in rule["backendRefs"]:
            assert backend["group"] == "inference.networking.k8s.io"
            assert backend["kind"] == "InferencePool"


def check_kube_docs(docs: list[dict]) -> None:
    kinds = set()
    for doc in docs:
        kinds.add(doc["kind"])
        if doc["apiVersion"].startswith(CORE_GROUPS):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        elif doc["kind"] == "InferencePool":
            check_inference_pool(doc)
        elif doc["kind"] == "HTTPRoute":
            check_http_route(doc)
        else:
            raise AssertionError(f"unchecked kind {doc['kind']} {doc['apiVersion']}")
    assert {"InferencePool", "Deployment", "Service", "ConfigMap"} <= kinds
    check_llmd(docs)
    check_transports(docs)


# What UCX needs to reach another node over TCP (UCX_TLS / UCX_NET_DEVICES in the UCX docs),
# written here independently of pdctl/plan/transport.py.
def ucx_over_tcp(env: dict[str, str]) -> bool:
    tls = env.get("UCX_TLS", "all").strip().lower()
    names = {t.split(":")[0] for t in tls.lstrip("^").split(",")}
    tcp = "tcp" not in names if tls.startswith("^") else bool(names & {"tcp", "all"})
    devices = env.get("UCX_NET_DEVICES", "all").strip().lower()
    netdev = devices == "all" or any(":" not in d for d in devices.split(","))
    return tcp and netdev


def engine_pods(docs: list[dict]) -> list[tuple[str, dict, dict]]:
    """(name, pod metadata, pod spec) of every engine pod template: Deployments and the
    leader and worker templates of LeaderWorkerSets (the EPP excluded)."""
    out = []
    for doc in docs:
        spec = doc.get("spec") or {}
        if doc["kind"] == "Deployment" and not doc["metadata"]["name"].endswith("-epp"):
            tpl = spec["template"]
            out.append((doc["metadata"]["name"], tpl["metadata"], tpl["spec"]))
        elif doc["kind"] == "LeaderWorkerSet":
            group = spec["leaderWorkerTemplate"]
            for key in ("leaderTemplate", "workerTemplate"):
                name = f"{doc['metadata']['name']}/{key}"
                out.append((name, group[key].get("metadata", {}), group[key]["spec"]))
    return out


def rdma_resources(container: dict) -> dict[str, str]:
    own = ("cpu", "memory", "ephemeral-storage", "nvidia.com/gpu")
    limits = container["resources"]["limits"]
    return {k: v for k, v in limits.items() if not k.startswith(own)}


def check_transports(docs: list[dict]) -> int:
    """Every engine pod either asks for RDMA (a device plugin's resource or a Multus network)
    and then has IPC_LOCK, or asks for none, has no capability and a UCX that reaches other
    nodes over TCP. Returns the number of pods with RDMA."""
    with_rdma = 0
    for name, meta, pod in engine_pods(docs):
        (vllm,) = [c for c in pod["containers"] if c["name"] == "vllm"]
        rdma = rdma_resources(vllm)
        networks = (meta.get("annotations") or {}).get("k8s.v1.cni.cncf.io/networks")
        added = vllm["securityContext"]["capabilities"].get("add", [])
        for c in pod.get("initContainers", []):
            assert "add" not in c["securityContext"]["capabilities"], (name, c["name"])
        if rdma or networks:
            with_rdma += 1
            assert added == ["IPC_LOCK"], name
            for key, value in rdma.items():
                assert vllm["resources"]["requests"][key] == value, (name, key)
            continue
        env = {e["name"]: e["value"] for e in vllm.get("env", []) if "value" in e}
        assert added == [], name
        assert ucx_over_tcp(env), (name, env.get("UCX_TLS"), env.get("UCX_NET_DEVICES"))
        assert "NVSHMEM_HCA_LIST" not in env, name
    return with_rdma
