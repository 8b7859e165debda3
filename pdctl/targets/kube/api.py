"""The REST face of one deployment on a cluster: the API client, the deployment's name and
namespace, API discovery (pdctl.targets.kube.discovery), and the calls every Kubernetes helper
makes (get, list, owns, the body pdctl sends). The helpers (apply.py, diff.py, wait.py,
status.py) take a KubeApi, not the target; KubeTarget (target.py) is a KubeApi with the Target
verbs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pdctl.errors import PdctlError, UsageError
from pdctl.targets.base import Stage
from pdctl.targets.kube.discovery import ApiError, Discovery, Resource, split
from pdctl.targets.stages import latest_line

HASH_ANNOTATION = "pdctl.io/hash"
# On cluster-scoped objects: the namespace of the deployment that applied them (two
# deployments of one name in two namespaces must not prune each other's ClusterRoles).
NAMESPACE_ANNOTATION = "pdctl.io/namespace"

# Never pruned or deleted: deleting either deletes everything in it or of its kind.
KEPT_KINDS = (("", "PersistentVolumeClaim"),)  # `down` keeps data unless told to delete volumes
DEFAULT_KUBECONFIG = "~/.kube/config"  # where kubectl looks without KUBECONFIG


def api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A client for the cluster of `kubeconfig` (a file, or several joined by `:` as in
    $KUBECONFIG; None: ~/.kube/config). A missing or malformed kubeconfig is one usage error
    (exit 2) before anything connects."""
    from kubernetes import client, config

    from pdctl.targets.kube.errors import check_kubeconfig, config_error, files_of

    files = kubeconfig or DEFAULT_KUBECONFIG
    if not files_of(files)[0]:
        if kubeconfig is None:
            raise UsageError(
                f"no kubeconfig: KUBECONFIG is not set and {DEFAULT_KUBECONFIG} does not exist",
                fix="set KUBECONFIG or pass --kubeconfig",
            )
        raise UsageError(
            f"kubeconfig file {kubeconfig} does not exist",
            fix="check --kubeconfig (or $KUBECONFIG)",
        )
    check_kubeconfig(files, context)  # not a kubeconfig, no such context: exit 2, one line
    try:
        cfg = client.Configuration()
        config.load_kube_config(config_file=files, context=context, client_configuration=cfg)
    except Exception as exc:  # what the check cannot see: bad fields, certificate files
        raise config_error(files, exc) from None
    return client.ApiClient(cfg)


def object_hash(obj: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def with_hash(obj: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(obj))
    out.setdefault("metadata", {}).setdefault("annotations", {})[HASH_ANNOTATION] = object_hash(obj)
    return out


@dataclass
class KubeApi:
    """One deployment's objects on one cluster, reached through `api` (a kubernetes ApiClient)
    as plain REST; `say` gets each step, `stage` where each pod is while a helper waits."""

    api: Any
    name: str
    namespace: str
    say: Callable[[str], None] = lambda _m: None
    stage: Callable[[Stage], None] = lambda _s: None
    timeout: float = 30.0
    discovery: Discovery = field(init=False)

    def __post_init__(self) -> None:
        self.discovery = Discovery(lambda path: self._call("GET", path))

    @property
    def selector(self) -> str:
        return f"app.kubernetes.io/instance={self.name},app.kubernetes.io/managed-by=pdctl"

    # -- REST ------------------------------------------------------------------------------
    def resource(self, kind: str, api_version: str | None = None) -> Resource:
        found = (
            self.discovery.find(api_version, kind) if api_version else self.discovery.by_kind(kind)
        )
        if found is None:
            raise PdctlError(
                self.discovery.missing([{"apiVersion": api_version or "v1", "kind": kind}]) or kind
            )
        return found

    def _path(
        self, kind: str, name: str | None = None, namespace: str | None = None,
        api_version: str | None = None,
    ) -> str:
        return self.resource(kind, api_version).path(namespace or self.namespace, name)

    def _call(
        self, method: str, path: str, body: Any = None, query: list | None = None,
        content_type: str = "application/json", as_text: bool = False,
    ) -> Any:
        """One REST call; None on 404, ApiError on other failures; `as_text`: the body as
        text (a pod's log), else decoded JSON."""
        accept = "*/*" if as_text else "application/json"
        headers = {"Accept": accept, "Content-Type": content_type}
        method, url, headers, body, _ = self.api.param_serialize(
            method, path, query_params=query or [], header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )
        try:
            resp = self.api.call_api(
                method, url, header_params=headers, body=body, _request_timeout=self.timeout
            )
        except Exception as exc:  # connection refused, TLS, timeout, DNS
            from pdctl.targets.kube.errors import unreachable

            host = getattr(getattr(self.api, "configuration", None), "host", "?")
            raise unreachable(host, exc) from None
        data = resp.read()
        if resp.status == 404:
            return None
        if resp.status >= 300:  # the Status's message, naming the object (an ApiError)
            from pdctl.targets.kube.errors import refused

            raise refused(method, path, resp.status, resp.reason, data, body)
        if as_text:
            return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
        return json.loads(data) if data else {}

    def get(
        self, kind: str, name: str, namespace: str | None = None, api_version: str | None = None
    ) -> dict[str, Any] | None:
        return self._call("GET", self._path(kind, name, namespace, api_version))

    def list_kind(self, kind: str, api_version: str | None = None) -> list[dict[str, Any]]:
        return self._list(self.resource(kind, api_version))

    def _list(self, res: Resource) -> list[dict[str, Any]]:
        data = self._call("GET", res.path(self.namespace), query=[("labelSelector", self.selector)])
        # Filter again here: never touch an object without this deployment's labels, even
        # when a server ignores the selector.
        return [o for o in (data or {}).get("items") or [] if self.owns(o, res.namespaced)]

    def owns(self, obj: dict[str, Any], namespaced: bool = True) -> bool:
        """This deployment's labels, and applied by pdctl itself: the hash annotation, no owner
        (a controller copies labels into Pods and Endpoints, never the annotation)."""
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        notes = meta.get("annotations") or {}
        return (
            labels.get("app.kubernetes.io/instance") == self.name
            and labels.get("app.kubernetes.io/managed-by") == "pdctl"
            and HASH_ANNOTATION in notes
            and not meta.get("ownerReferences")
            and (namespaced or notes.get(NAMESPACE_ANNOTATION) == self.namespace)
        )

    # -- plan / apply / prune ----------------------------------------------------------------
    def require_served(self, objs: list[dict[str, Any]]) -> None:
        """Every kind in `objs` is served, or one line naming what to install (before
        anything is applied)."""
        line = self.discovery.missing(objs)
        if line:
            raise PdctlError(line)

    @staticmethod
    def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
        return split(obj["apiVersion"])[0], obj["kind"], obj["metadata"]["name"]

    def body(self, obj: dict[str, Any], res: Resource) -> dict[str, Any]:
        """What pdctl sends for `obj`: with the hash annotation, and on a cluster-scoped
        object the namespace annotation."""
        body = with_hash(obj)
        if not res.namespaced:
            body["metadata"]["annotations"][NAMESPACE_ANNOTATION] = self.namespace
        return body

    # -- status / logs (pdctl.targets.kube.status) -----------------------------------------
    def pods(self) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        items = (self._call("GET", path, query=[("labelSelector", self.selector)]) or {}).get(
            "items"
        ) or []
        # Filter again: a server that ignores the selector must not show others' pods.
        return [
            p
            for p in items
            if ((p.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/instance")
            == self.name
        ]

    def events(self) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{self.namespace}/events"
        return (self._call("GET", path) or {}).get("items") or []

    def last_log_line(self, pod: str, container: str, previous: bool = True) -> str:
        """The last meaningful line of a container's log (`previous`: of its last run)."""

        query = [("container", container), ("tailLines", "50")]
        if previous:
            query.append(("previous", "true"))
        path = f"/api/v1/namespaces/{self.namespace}/pods/{pod}/log"
        try:
            text = self._call("GET", path, query=query, as_text=True)
        except ApiError:  # no log (yet): the reason stands without it
            return ""
        return latest_line(text or "")
