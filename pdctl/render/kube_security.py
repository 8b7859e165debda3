"""What the llm-d parts need from the API server, and no more: the decode sidecar's SSRF
allow-list (its own ServiceAccount, its token mounted into the sidecar alone) and the EPP's
metrics auth. The containers' securityContext is kube.container_security."""

from __future__ import annotations

from typing import Any

from pdctl.compat import LLMD
from pdctl.plan.model import Plan
from pdctl.render.kube import Obj, metadata

RBAC_API = "rbac.authorization.k8s.io/v1"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_VOLUME = "kube-api-access"


def sidecar_account(plan: Plan) -> str:
    return f"{plan.name}-routing-proxy"


def token_volume() -> Obj:
    """What automountServiceAccountToken would mount, as a volume one container can take."""
    return {
        "name": TOKEN_VOLUME,
        "projected": {
            "defaultMode": 0o444,
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
                        ]
                    }
                },
            ],
        },
    }


def token_mount() -> Obj:
    return {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True}


def _role(plan: Plan, kind: str, name: str, component: str, rules: list[Obj]) -> Obj:
    meta = metadata(plan, name, component, namespaced=kind == "Role")
    return {"apiVersion": RBAC_API, "kind": kind, "metadata": meta, "rules": rules}


def _binding(plan: Plan, kind: str, name: str, account: str, component: str) -> Obj:
    return {
        "apiVersion": RBAC_API, "kind": f"{kind}Binding",
        "metadata": metadata(plan, name, component, namespaced=kind == "Role"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [
            {"kind": "ServiceAccount", "name": account, "namespace": plan.spec.kubernetes.namespace}
        ],
    }


def _account(plan: Plan, name: str, component: str, **extra: Any) -> Obj:
    meta = metadata(plan, name, component)
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta, **extra}


def sidecar_rbac(plan: Plan) -> list[Obj]:
    """The decode pods' account: with --enable-ssrf-protection the routing sidecar lists and
    watches its InferencePool (by name) and the pods its selector matches, in the pool's
    namespace (llm-d-router v0.10.0 pkg/sidecar/proxy/allowlist.go); nothing else."""
    name = sidecar_account(plan)
    watch = ["list", "watch"]
    rules = [
        {"apiGroups": [LLMD.pool_group], "resources": ["inferencepools"], "verbs": watch},
        {"apiGroups": [""], "resources": ["pods"], "verbs": watch},
    ]
    return [
        # The token is mounted into the sidecar alone (token_volume), not into vLLM.
        _account(plan, name, "routing-proxy", automountServiceAccountToken=False),
        _role(plan, "Role", name, "routing-proxy", rules),
        _binding(plan, "Role", name, name, "routing-proxy"),
    ]


def epp_rbac(plan: Plan, name: str) -> list[Obj]:
    """The endpoint picker's account: it reads the pool, its pods and the objectives and
    rewrites that apply to them, in the namespace (a Role), and reviews metrics tokens
    (metrics_rbac)."""
    read = ["get", "list", "watch"]
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": read},
        {"apiGroups": [LLMD.pool_group], "resources": ["inferencepools"], "verbs": read},
        {
            "apiGroups": ["llm-d.ai", "inference.networking.x-k8s.io"],
            "resources": ["inferenceobjectives", "inferencemodelrewrites"], "verbs": read,
        },
    ]
    return [
        _account(plan, name, "epp"), _role(plan, "Role", name, "epp", rules),
        _binding(plan, "Role", name, name, "epp"), *metrics_rbac(plan, name),
    ]


def cluster_name(plan: Plan, role: str) -> str:
    """A cluster-scoped object's name: `<namespace>.<name>.<role>`. Namespace and deployment
    name are DNS-1123 labels, which have no dot, so two deployments never share one (with `-`
    namespace `llm` + `d-qwen` and `llm-d` + `qwen` did); a DNS-1123 subdomain of at most
    63 + 50 + the role's length characters."""
    return f"{plan.spec.kubernetes.namespace}.{plan.name}.{role}"


def metrics_rbac(plan: Plan, epp_account: str) -> list[Obj]:
    """--metrics-endpoint-auth: the EPP asks the API server to authenticate (TokenReview) and
    authorize (SubjectAccessReview) each scrape, which only a ClusterRole can grant; scrapers
    need `get` on the non-resource URL /metrics (llm-d-router v0.10.0
    config/charts/routerlib/templates/_rbac.yaml). Cluster-wide names: cluster_name."""
    auth = cluster_name(plan, "epp-metrics-auth")
    reader = cluster_name(plan, "epp-metrics-reader")
    review = [
        {"apiGroups": [group], "resources": [kind], "verbs": ["create"]}
        for group, kind in (
            ("authentication.k8s.io", "tokenreviews"),
            ("authorization.k8s.io", "subjectaccessreviews"),
        )
    ]
    # Bound to nobody: bind your Prometheus' ServiceAccount to it (docs/phase2-kubernetes.md).
    scrape = [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    auth_role = _role(plan, "ClusterRole", auth, "epp", review)
    reader_role = _role(plan, "ClusterRole", reader, "epp", scrape)
    return [auth_role, _binding(plan, "ClusterRole", auth, epp_account, "epp"), reader_role]
