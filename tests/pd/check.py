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
from pdctl.plan.router import services
from tests.conftest import K8S_VERSION, ROOT

DATA = Path(__file__).parent / "data"
CRDS = ROOT / "tests" / "data" / "crds"
CORE_GROUPS = ("v1", "apps/", "rbac.authorization.k8s.io/", "batch/", "policy/")


@cache
def router_flags() -> frozenset[str]:
    """Every long option in vllm-router 0.1.17's --help (tests/pd/data/vllm_router_help.txt)."""
    text = (DATA / "vllm_router_help.txt").read_text()
    return frozenset(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))


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
    for svc in services(plan):
        if svc.role != "router":
            continue
        assert svc.command[0] == "vllm-router"
        for arg in svc.command:
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
