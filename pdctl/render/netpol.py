"""NetworkPolicies for the llm-d pods (kubernetes.networkPolicy): who may reach them."""

from __future__ import annotations

from pdctl.compat import LLMD
from pdctl.plan.llmd import K8S_PREFILL_PORT
from pdctl.plan.model import Plan
from pdctl.render.kube import Obj, metadata, selector

NAMESPACE_LABEL = "kubernetes.io/metadata.name"  # set on every Namespace by the API server


def _peer(namespace: str, labels: dict[str, str]) -> Obj:
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: namespace}},
        "podSelector": {"matchLabels": labels},
    }


def _policy(plan: Plan, component: str, ingress: list[Obj]) -> Obj:
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": metadata(plan, f"{plan.name}-{component}", component),
        "spec": {
            "podSelector": {"matchLabels": selector(plan, component)}, "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def network_policies(plan: Plan, pool: dict[str, str], workers: dict[str, str]) -> list[Obj]:
    """Decode: the sidecar's 8000 from the Gateway's proxy pods and the EPP (it scrapes
    metrics on the pool's target port); prefill: 8000 from the EPP. Pool pods reach each other
    on every port: the decode sidecar sends prefill requests, vLLM's NIXL side channel and
    UCX's transfer connections use ports that vary. vLLM's 8200 in the decode pod is left to
    the sidecar (localhost, which no NetworkPolicy filters). EPP: its ext-proc port from the
    Gateway's proxy pods, its metrics port from anyone (each scrape needs an authorized token).
    Kubelet probes come from the node, which NetworkPolicy always lets in. `workers`: the
    labels of multi-node groups' worker pods (render/lws.py; none without groups), which carry
    no pool labels: they reach the pool's pods as the pool's pods do (rendezvous, DP, NIXL)."""
    ns = plan.spec.kubernetes.namespace
    gateway_ns = plan.spec.kubernetes.gateway_namespace or ns
    epp: Obj = {"podSelector": {"matchLabels": selector(plan, "epp")}}
    peers = [{"podSelector": {"matchLabels": labels}} for labels in (pool, workers) if labels]
    sidecar: list[Obj] = [{"port": K8S_PREFILL_PORT, "protocol": "TCP"}]
    gateway = _peer(gateway_ns, dict(plan.gateway_pods))
    decode: list[Obj] = [{"from": [gateway, epp], "ports": sidecar}, {"from": list(peers)}]
    prefill: list[Obj] = [{"from": [epp], "ports": sidecar}, {"from": list(peers)}]
    picker: list[Obj] = [
        {"from": [gateway], "ports": [{"port": LLMD.epp_grpc_port, "protocol": "TCP"}]},
        {"ports": [{"port": LLMD.epp_metrics_port, "protocol": "TCP"}]},
    ]
    return [
        _policy(plan, "epp", picker), _policy(plan, "prefill", prefill),
        _policy(plan, "decode", decode),
    ]
