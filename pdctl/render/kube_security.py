"""What the llm-d parts need from the API server, and no more: the decode sidecar's SSRF
allow-list (its own ServiceAccount, its token mounted into the sidecar alone) and the EPP's
metrics auth. The containers' securityContext is kube.container_security."""

from __future__ import annotations

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
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
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


def _binding(plan: Plan, kind: str, name: str, account: str, component: str) -> Obj:
    cluster = kind == "ClusterRole"
    return {
        "apiVersion": RBAC_API,
        "kind": f"{kind}Binding",
        "metadata": metadata(plan, name, component, namespaced=not cluster),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [
            {"kind": "ServiceAccount", "name": account, "namespace": plan.spec.kubernetes.namespace}
        ],
    }


def sidecar_rbac(plan: Plan) -> list[Obj]:
    """The decode pods' account: with --enable-ssrf-protection the routing sidecar lists and
    watches its InferencePool (by name) and the pods its selector matches, in the pool's
    namespace (llm-d-router v0.10.0 pkg/sidecar/proxy/allowlist.go); nothing else."""
    name = sidecar_account(plan)
    watch = ["list", "watch"]
    role = {
        "apiVersion": RBAC_API,
        "kind": "Role",
        "metadata": metadata(plan, name, "routing-proxy"),
        "rules": [
            {"apiGroups": [LLMD.pool_group], "resources": ["inferencepools"], "verbs": watch},
            {"apiGroups": [""], "resources": ["pods"], "verbs": watch},
        ],
    }
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(plan, name, "routing-proxy"),
        # The token is mounted into the sidecar alone (token_volume), not into vLLM.
        "automountServiceAccountToken": False,
    }
    return [account, role, _binding(plan, "Role", name, name, "routing-proxy")]


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
    auth_role = {
        "apiVersion": RBAC_API,
        "kind": "ClusterRole",
        "metadata": metadata(plan, auth, "epp", namespaced=False),
        "rules": [
            {
                "apiGroups": ["authentication.k8s.io"],
                "resources": ["tokenreviews"],
                "verbs": ["create"],
            },
            {
                "apiGroups": ["authorization.k8s.io"],
                "resources": ["subjectaccessreviews"],
                "verbs": ["create"],
            },
        ],
    }
    # Bound to nobody: bind your Prometheus' ServiceAccount to it (docs/phase2-kubernetes.md).
    reader_role = {
        "apiVersion": RBAC_API,
        "kind": "ClusterRole",
        "metadata": metadata(plan, reader, "epp", namespaced=False),
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }
    return [auth_role, _binding(plan, "ClusterRole", auth, epp_account, "epp"), reader_role]
