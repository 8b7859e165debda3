"""The Kubernetes target: server-side apply (field manager `pdctl`), prune, rollout wait, delete.

Which kinds exist, where their REST paths are and whether they are namespaced comes from the
cluster's API discovery (pdctl.targets.kube.discovery), read once per run. Objects are found by
the labels every rendered object carries (`app.kubernetes.io/instance=<name>`,
`app.kubernetes.io/managed-by=pdctl`) and the hash annotation pdctl writes when it applies.
Calls go through the official `kubernetes` client's ApiClient as plain REST.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pdctl.errors import PdctlError, UsageError
from pdctl.targets.base import Closing, Stage, StatusRow, Stopped, Write
from pdctl.targets.kube.discovery import ApiError, Discovery, Resource, split
from pdctl.targets.kube.status import pod_logs, pod_ready, status_rows
from pdctl.targets.kube.status import rolled_out as rolled_out  # re-exported
from pdctl.targets.stages import latest_line
from pdctl.targets.state import Change

if TYPE_CHECKING:
    from pdctl.targets.kube.diff import ObjectDiff
    from pdctl.targets.hosts.rollout import Outcome

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


# A change to an object in the words `up` prints (create, update, unchanged, prune).
WORDS = {"start": "create", "restart": "update", "keep": "unchanged", "stop": "prune"}
ACTIONS = {word: action for action, word in WORDS.items()}


@dataclass
class KubeTarget(Closing):
    """A deployment's objects on one cluster. `objects` (the bundle's, in apply order) is what
    `changes`, `apply` and `endpoints` work on; the `*_objects` methods take them explicitly."""

    kind: ClassVar[Literal["kubernetes"]] = "kubernetes"
    api: Any
    name: str
    namespace: str
    say: Callable[[str], None] = lambda _m: None
    stage: Callable[[Stage], None] = lambda _s: None
    timeout: float = 30.0
    down_timeout: float = 300.0  # how long `down` waits for the pods to terminate
    objects: list[dict[str, Any]] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)  # by the last delete_objects()
    unreachable: dict[str, str] = field(default_factory=dict)  # a cluster is one endpoint
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
        self,
        kind: str,
        name: str | None = None,
        namespace: str | None = None,
        api_version: str | None = None,
    ) -> str:
        return self.resource(kind, api_version).path(namespace or self.namespace, name)

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list | None = None,
        content_type: str = "application/json",
        as_text: bool = False,
    ) -> Any:
        """One REST call; None on 404, ApiError on other failures; `as_text`: the body as
        text (a pod's log), else decoded JSON."""
        accept = "*/*" if as_text else "application/json"
        headers = {"Accept": accept, "Content-Type": content_type}
        method, url, headers, body, _ = self.api.param_serialize(
            method,
            path,
            query_params=query or [],
            header_params=headers,
            body=body,
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

    def owned_objects(self, objs: list[dict[str, Any]] | None = None) -> list[tuple[Resource, str]]:
        """(resource, name) of every object this deployment applied, in apply order (of every
        kind pdctl could have created: the bundle's, and any listable, creatable, deletable)."""
        from pdctl.targets.kube.apply import owned_objects

        return owned_objects(self, objs or [])

    def owned(self) -> list[tuple[str, str]]:
        """(kind, name) of every object with this deployment's labels."""
        return [(res.kind, name) for res, name in self.owned_objects()]

    @staticmethod
    def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
        return split(obj["apiVersion"])[0], obj["kind"], obj["metadata"]["name"]

    # -- the Target verbs -------------------------------------------------------------------
    def close(self) -> None:
        close = getattr(self.api, "close", None)
        if close is not None:
            close()

    def interrupts(self) -> None:
        return None

    def changes(self) -> list[Change]:
        """One Change per object: unit `Kind/name`, action in `WORDS` (create -> start ...)."""
        return [
            Change(self.namespace, f"{kind}/{name}", kind, ACTIONS[word], word)  # type: ignore[arg-type]
            for word, kind, name in self.object_changes(self.objects)
        ]

    def apply(
        self,
        changes: list[Change],
        secrets: dict[str, str],
        timeout: float = 900.0,
        keep_going: bool = False,
    ) -> Outcome:
        """Apply the bundle's changed objects, wait until every Deployment rolled out, then
        prune (a failed rollout keeps what prune would delete: pdctl.targets.kube.apply).
        Secret values never reach a cluster through pdctl (Secrets are referenced)."""
        from pdctl.targets.kube.apply import roll_out
        from pdctl.targets.hosts.rollout import Outcome

        roll_out(self, self.objects, timeout)
        return Outcome()

    def down(self, delete_volumes: bool = False) -> Stopped:
        """Delete the objects, then wait until the deployment's pods are gone (their GPUs
        free), reporting each terminating pod; raises when some outlive `down_timeout`."""
        from pdctl.targets.kube.wait import wait_gone

        gone = self.delete_objects(volumes=delete_volumes)
        wait_gone(self, self.down_timeout)
        return Stopped(removed=gone, kept=list(self.kept))

    def endpoints(self) -> list[str]:
        """None known from outside the cluster: clients reach its Services (see the docs)."""
        return []

    # -- plan / apply / prune (objects given: pdctl.targets.kube.apply) -------------------
    def object_changes(self, objs: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        """(action, kind, name): create, update (also a live object edited since), unchanged,
        or prune; refuses (one line) a rendered name taken by an object pdctl did not apply."""
        from pdctl.targets.kube.apply import object_changes

        return object_changes(self, objs)

    def body(self, obj: dict[str, Any], res: Resource) -> dict[str, Any]:
        """What pdctl sends for `obj`: with the hash annotation, and on a cluster-scoped
        object the namespace annotation."""
        body = with_hash(obj)
        if not res.namespaced:
            body["metadata"]["annotations"][NAMESPACE_ANNOTATION] = self.namespace
        return body

    def apply_objects(self, objs: list[dict[str, Any]]) -> None:
        """Server-side apply each object (field manager pdctl, force) in apply order, then prune
        the rest in reverse order, without waiting (`apply` waits before it prunes)."""
        from pdctl.targets.kube.apply import apply_objects, prune

        apply_objects(self, objs)
        prune(self, objs)

    def wait(self, objs: list[dict[str, Any]], timeout: float, poll: float = 2.0) -> None:
        """Wait until every Deployment has rolled out, reporting each pod's stage; fail with
        the reason of a pod that is not ready (pdctl.targets.kube.wait)."""
        from pdctl.targets.kube.wait import wait

        wait(self, objs, timeout, poll)

    def delete_objects(self, volumes: bool = False) -> list[tuple[str, str]]:
        """Delete every object with this deployment's labels (twice is harmless), except its
        PersistentVolumeClaims (the downloaded weights) unless `volumes`: those it keeps are
        in `self.kept`."""
        gone = []
        self.kept = []
        for res, name in reversed(self.owned_objects()):
            if (res.group, res.kind) in KEPT_KINDS and not volumes:
                self.kept.append((res.kind, name))
                continue
            self._call("DELETE", res.path(self.namespace, name))
            self.say(f"deleted {res.kind}/{name}")
            gone.append((res.kind, name))
        return gone

    # -- a server-side dry run (pdctl.targets.kube.diff) -------------------------------------
    def preview(self) -> list[ObjectDiff]:
        """Every object applied with dryRun=All against its live version, and what prune
        would delete; nothing is stored. Refused as `up` refuses a rendered name taken by an
        object pdctl did not apply."""
        from pdctl.targets.kube.apply import live_objects, refuse_foreign
        from pdctl.targets.kube.diff import preview

        refuse_foreign(self, live_objects(self, self.objects))
        return preview(self, self.objects)

    def dry_run_changes(self) -> list[Change]:
        """`changes()` as the server's dry run answers them (`up --dry-run`)."""
        return [
            Change(self.namespace, f"{d.kind}/{d.name}", d.kind, ACTIONS[d.action], d.action)  # type: ignore[arg-type]
            for d in self.preview()
        ]

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

    def status(self) -> list[StatusRow]:
        pods = self.pods()
        ready = all(pod_ready(p) for p in pods)
        events = [] if ready else self.events()
        lws = [o for o in self.objects if o["kind"] == "LeaderWorkerSet"]
        return status_rows(
            self.list_kind("Deployment", "apps/v1"),
            pods,
            events,
            self.last_log_line,
            self.list_kind("LeaderWorkerSet", lws[0]["apiVersion"]) if lws else None,
        )

    def logs(self, unit: str | None, follow: bool, lines: int, write: Write) -> None:
        pod_logs(self, unit, lines, follow, write)
