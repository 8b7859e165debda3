"""The Kubernetes target: server-side apply (field manager `pdctl`), prune, rollout wait, delete.

Objects are found by the labels every rendered object carries
(`app.kubernetes.io/instance=<name>`, `app.kubernetes.io/managed-by=pdctl`). Calls go through
the official `kubernetes` client's ApiClient as plain REST (no discovery needed).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from pdctl.errors import PdctlError
from pdctl.render.bundle import Bundle

FIELD_MANAGER = "pdctl"
HASH_ANNOTATION = "pdctl.io/hash"

# kind -> (API prefix, plural, namespaced). Order = apply order; deletes go in reverse.
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "Service": ("/api/v1", "services", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "StatefulSet": ("/apis/apps/v1", "statefulsets", True),
    "LeaderWorkerSet": ("/apis/leaderworkerset.x-k8s.io/v1", "leaderworkersets", True),
    "InferencePool": ("/apis/inference.networking.k8s.io/v1", "inferencepools", True),
}
PRUNABLE = [k for k in RESOURCES if k != "Namespace"]
KEPT_KINDS = ("PersistentVolumeClaim",)  # `down` keeps data unless told to delete volumes


def api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    from kubernetes import client, config

    try:
        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    except Exception as exc:  # no kubeconfig, bad context
        raise PdctlError(f"cannot load the kubeconfig: {exc}") from None
    return client.ApiClient(cfg)


def objects_of(bundle: Bundle) -> list[dict[str, Any]]:
    objs = []
    for artifact in bundle:
        for doc in yaml.safe_load_all(artifact.text):
            if doc:
                objs.append(doc)
    order = list(RESOURCES)
    return sorted(objs, key=lambda o: order.index(o["kind"]) if o["kind"] in order else 99)


def object_hash(obj: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def with_hash(obj: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(obj))
    out.setdefault("metadata", {}).setdefault("annotations", {})[HASH_ANNOTATION] = object_hash(obj)
    return out


@dataclass
class KubeTarget:
    api: Any
    name: str
    namespace: str
    say: Callable[[str], None] = lambda _m: None
    timeout: float = 30.0
    _found: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    kept: list[tuple[str, str]] = field(default_factory=list)  # by the last delete()

    @property
    def selector(self) -> str:
        return f"app.kubernetes.io/instance={self.name},app.kubernetes.io/managed-by=pdctl"

    # -- REST ------------------------------------------------------------------------------
    def _path(self, kind: str, name: str | None = None, namespace: str | None = None) -> str:
        if kind not in RESOURCES:
            raise PdctlError(f"pdctl cannot apply objects of kind {kind}")
        prefix, plural, namespaced = RESOURCES[kind]
        path = prefix
        if namespaced:
            path += f"/namespaces/{namespace or self.namespace}"
        path += f"/{plural}"
        return path + (f"/{name}" if name else "")

    def _call(self, method: str, path: str, body: Any = None, query: list | None = None,
              content_type: str = "application/json") -> Any:
        """One REST call; None on 404, PdctlError on other failures."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        method, url, headers, body, _ = self.api.param_serialize(
            method, path, query_params=query or [], header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )
        try:
            resp = self.api.call_api(method, url, header_params=headers, body=body,
                                     _request_timeout=self.timeout)
        except Exception as exc:  # connection refused, TLS, timeout
            raise PdctlError(f"Kubernetes API: {method} {path}: {exc}") from None
        data = resp.read()
        if resp.status == 404:
            return None
        if resp.status >= 300:
            text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
            raise PdctlError(f"Kubernetes API: {method} {path}: {resp.status} {resp.reason}: "
                             f"{text[:300]}")
        return json.loads(data) if data else {}

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self._call("GET", self._path(kind, name, namespace))

    def list_kind(self, kind: str) -> list[dict[str, Any]]:
        data = self._call("GET", self._path(kind), query=[("labelSelector", self.selector)])
        # Filter again here: never touch an object without this deployment's labels, even
        # when a server ignores the selector.
        return [o for o in (data or {}).get("items") or [] if self.owns(o)]

    def owns(self, obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return (labels.get("app.kubernetes.io/instance") == self.name
                and labels.get("app.kubernetes.io/managed-by") == "pdctl")

    # -- plan / apply / prune ----------------------------------------------------------------
    def owned(self) -> list[tuple[str, str]]:
        """(kind, name) of every object with this deployment's labels."""
        out = []
        for kind in PRUNABLE:
            for obj in self.list_kind(kind):
                out.append((kind, obj["metadata"]["name"]))
        return out

    def changes(self, objs: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        """(action, kind, name): create, update, unchanged, or prune."""
        out = []
        wanted = set()
        for obj in objs:
            kind, meta = obj["kind"], obj["metadata"]
            wanted.add((kind, meta["name"]))
            live = self.get(kind, meta["name"], meta.get("namespace"))
            if live is None:
                out.append(("create", kind, meta["name"]))
                continue
            live_hash = ((live.get("metadata") or {}).get("annotations") or {}).get(HASH_ANNOTATION)
            action = "unchanged" if live_hash == object_hash(obj) else "update"
            out.append((action, kind, meta["name"]))
        for kind, name in self.owned():
            if (kind, name) not in wanted:
                out.append(("prune", kind, name))
        return out

    def apply(self, objs: list[dict[str, Any]]) -> None:
        """Server-side apply each object (field manager pdctl, force), then prune the rest."""
        wanted = set()
        for obj in objs:
            kind, meta = obj["kind"], obj["metadata"]
            wanted.add((kind, meta["name"]))
            body = with_hash(obj)
            path = self._path(kind, meta["name"], meta.get("namespace"))
            query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
            done = self._call("PATCH", path, body, query, "application/apply-patch+yaml")
            if done is None:
                # A real API server creates on apply; servers without apply-create get a POST.
                self._call("POST", self._path(kind, None, meta.get("namespace")), body,
                           [("fieldManager", FIELD_MANAGER)])
            self.say(f"applied {kind}/{meta['name']}")
        for kind, name in self.owned():
            if (kind, name) not in wanted:
                self._call("DELETE", self._path(kind, name))
                self.say(f"pruned {kind}/{name}")

    def wait(self, objs: list[dict[str, Any]], timeout: float, poll: float = 2.0) -> None:
        """Wait until every Deployment has rolled out (updated, available, observed)."""
        deadline = time.monotonic() + timeout
        pending = [o["metadata"]["name"] for o in objs if o["kind"] == "Deployment"]
        while pending:
            for name in list(pending):
                if rolled_out(self.get("Deployment", name)):
                    pending.remove(name)
                    self.say(f"Deployment/{name} rolled out")
            if not pending:
                return
            if time.monotonic() > deadline:
                raise PdctlError(f"Deployment/{pending[0]} not rolled out after {int(timeout)} s; "
                                 f"see `pdctl status` and `pdctl logs`")
            time.sleep(poll)

    def delete(self, volumes: bool = False) -> list[tuple[str, str]]:
        """Delete every object with this deployment's labels (twice is harmless), except its
        PersistentVolumeClaims (the downloaded weights) unless `volumes`: those it keeps are
        in `self.kept`."""
        gone = []
        self.kept = []
        for kind, name in reversed(self.owned()):
            if kind in KEPT_KINDS and not volumes:
                self.kept.append((kind, name))
                continue
            self._call("DELETE", self._path(kind, name))
            self.say(f"deleted {kind}/{name}")
            gone.append((kind, name))
        return gone

    # -- status / logs ------------------------------------------------------------------------
    def status(self) -> list[dict[str, str]]:
        rows = []
        for dep in self.list_kind("Deployment"):
            st = dep.get("status") or {}
            spec = dep.get("spec") or {}
            labels = (dep.get("metadata") or {}).get("labels") or {}
            rows.append({
                "node": "-",
                "unit": dep["metadata"]["name"],
                "role": labels.get("app.kubernetes.io/component", "-"),
                "pod": f"{st.get('readyReplicas', 0)}/{spec.get('replicas', 1)} ready",
                "health": "healthy" if rolled_out(dep) else "not ready",
            })
        for pod in (self._call("GET", f"/api/v1/namespaces/{self.namespace}/pods",
                              query=[("labelSelector", self.selector)]) or {}).get("items", []):
            st = pod.get("status") or {}
            labels = pod["metadata"].get("labels") or {}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in st.get("conditions") or [])
            rows.append({
                "node": (pod.get("spec") or {}).get("nodeName", "-"),
                "unit": pod["metadata"]["name"],
                "role": labels.get("app.kubernetes.io/component", "-"),
                "pod": st.get("phase", "-"),
                "health": "healthy" if ready else "not ready",
            })
        return rows

    def logs(self, unit: str | None, lines: int, follow: bool, write: Callable[[str], Any]) -> None:
        pods = (self._call("GET", f"/api/v1/namespaces/{self.namespace}/pods",
                           query=[("labelSelector", self.selector)]) or {}).get("items", [])
        names = [p["metadata"]["name"] for p in pods
                 if unit is None or p["metadata"]["name"].startswith(unit)]
        if not names:
            raise PdctlError(f"no pods of {self.name!r} match {unit or 'any unit'}")
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        for name in names if not follow else names[:1]:
            if follow:
                stream: Any = core.read_namespaced_pod_log(
                    name, self.namespace, follow=True, tail_lines=lines, _preload_content=False
                )
                for chunk in stream.stream():
                    write(chunk.decode("utf-8", "replace"))
                return
            write(core.read_namespaced_pod_log(name, self.namespace, tail_lines=lines))


def rolled_out(dep: dict[str, Any] | None) -> bool:
    if not dep:
        return False
    meta, spec, st = dep.get("metadata") or {}, dep.get("spec") or {}, dep.get("status") or {}
    want = spec.get("replicas", 1)
    return (
        st.get("observedGeneration", 0) >= meta.get("generation", 1)
        and st.get("updatedReplicas", 0) == want
        and st.get("availableReplicas", 0) == want
        and st.get("replicas", 0) == want
    )
