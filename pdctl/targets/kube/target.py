"""The Kubernetes target: server-side apply (field manager `pdctl`), prune, rollout wait, delete.

Which kinds exist, where their REST paths are and whether they are namespaced comes from the
cluster's API discovery (pdctl.targets.kube.discovery), read once per run. Objects are found by
the labels every rendered object carries (`app.kubernetes.io/instance=<name>`,
`app.kubernetes.io/managed-by=pdctl`) and the hash annotation pdctl writes when it applies.
Calls go through the official `kubernetes` client's ApiClient as plain REST (api.py: KubeApi,
which the helpers take).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pdctl.errors import PdctlError
from pdctl.targets.base import Closing, Observer, StatusRow, Stopped, Write
from pdctl.targets.kube.api import KEPT_KINDS, KubeApi
from pdctl.targets.kube.diff import ObjectDiff
from pdctl.targets.kube.discovery import Resource
from pdctl.targets.kube.status import pod_logs, pod_ready, status_rows
from pdctl.targets.outcome import Outcome
from pdctl.targets.state import START_GRACE, Change

# A change to an object in the words `up` prints (create, update, unchanged, prune).
WORDS = {"start": "create", "restart": "update", "keep": "unchanged", "stop": "prune"}
ACTIONS = {word: action for action, word in WORDS.items()}


@dataclass
class KubeTarget(KubeApi, Closing):
    """A deployment's objects on one cluster. `objects` (the bundle's, in apply order) is what
    `changes`, `apply` and `endpoints` work on; the `*_objects` methods take them explicitly."""

    kind: ClassVar[Literal["kubernetes"]] = "kubernetes"
    down_timeout: float = 300.0  # how long `down` waits for the pods to terminate
    objects: list[dict[str, Any]] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)  # by the last delete_objects()
    unreachable: dict[str, str] = field(default_factory=dict)  # a cluster is one endpoint
    plan: Any = None  # the Plan whose pods observe() reads

    def owned_objects(self, objs: list[dict[str, Any]] | None = None) -> list[tuple[Resource, str]]:
        """(resource, name) of every object this deployment applied, in apply order (of every
        kind pdctl could have created: the bundle's, and any listable, creatable, deletable)."""
        from pdctl.targets.kube.apply import owned_objects

        return owned_objects(self, objs or [])

    def owned(self) -> list[tuple[str, str]]:
        """(kind, name) of every object with this deployment's labels."""
        return [(res.kind, name) for res, name in self.owned_objects()]

    # -- the Target verbs -------------------------------------------------------------------
    def close(self) -> None:
        close = getattr(self.api, "close", None)
        if close is not None:
            close()

    def interrupts(self) -> None:
        return None

    def changes(
        self, grace: float = START_GRACE, restart: frozenset[str] = frozenset()
    ) -> list[Change]:
        """One Change per object: unit `Kind/name`, action in `WORDS` (create -> start ...).
        No `restart` here (CAPABILITIES: `kubectl rollout restart` does it)."""
        if restart:
            raise PdctlError("pdctl restart does not restart Kubernetes workloads; use kubectl "
                             "rollout restart")
        return [
            Change(self.namespace, f"{kind}/{name}", kind, ACTIONS[word], word)  # type: ignore[arg-type]
            for word, kind, name in self.object_changes(self.objects)
        ]

    def diff(self) -> tuple[list[Change], dict[str, str]]:
        """The server's dry run of every object against its live version, and what prune
        would delete (`preview`), with each changed object's diff (key `Kind/name`)."""
        found = self.preview()
        changes = [
            Change(self.namespace, f"{d.kind}/{d.name}", d.kind, ACTIONS[d.action], d.action)  # type: ignore[arg-type]
            for d in found
        ]
        return changes, {f"{d.kind}/{d.name}": d.text for d in found if d.text}

    def apply(
        self, changes: list[Change], secrets: dict[str, str], timeout: float = 900.0,
        keep_going: bool = False,
    ) -> Outcome:
        """Apply the bundle's changed objects, wait until every Deployment rolled out, then
        prune (a failed rollout keeps what prune would delete: pdctl.targets.kube.apply).
        Secret values never reach a cluster through pdctl (Secrets are referenced)."""
        from pdctl.targets.kube.apply import roll_out

        roll_out(self, self.objects, timeout)
        return Outcome()

    def down(self, delete_volumes: bool = False, timeout: float | None = None) -> Stopped:
        """Delete the objects, then wait until the deployment's pods are gone (their GPUs
        free), reporting each terminating pod; raises when some outlive `timeout` (default:
        `down_timeout`)."""
        from pdctl.targets.kube.wait import wait_gone

        gone = self.delete_objects(volumes=delete_volumes)
        wait_gone(self, self.down_timeout if timeout is None else timeout)
        return Stopped(removed=gone, kept=list(self.kept))

    def down_plan(self, delete_volumes: bool = False) -> Stopped:
        """What `down` would delete and keep (namespace, `Kind/name`), reading only."""
        out = Stopped()
        for res, name in self.owned_objects():
            keep = (res.group, res.kind) in KEPT_KINDS and not delete_volumes
            (out.kept if keep else out.removed).append((self.namespace, f"{res.kind}/{name}"))
        return out

    def observe(self) -> Observer:
        from pdctl.targets.kube.observe import KubeObserver

        assert self.plan is not None, "open_target gives the plan"
        return KubeObserver(self, self.plan)

    def endpoints(self) -> list[str]:
        """None known from outside the cluster: clients reach its Services (see the docs)."""
        return []

    # -- plan / apply / prune (objects given: pdctl.targets.kube.apply) -------------------
    def object_changes(self, objs: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        """(action, kind, name): create, update (also a live object edited since), unchanged,
        or prune; refuses (one line) a rendered name taken by an object pdctl did not apply."""
        from pdctl.targets.kube.apply import object_changes

        return object_changes(self, objs)

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

    # -- status / logs (pdctl.targets.kube.status) -----------------------------------------
    def status(self) -> list[StatusRow]:
        pods = self.pods()
        ready = all(pod_ready(p) for p in pods)
        events = [] if ready else self.events()
        lws = [o for o in self.objects if o["kind"] == "LeaderWorkerSet"]
        return status_rows(
            self.list_kind("Deployment", "apps/v1"), pods, events, self.last_log_line,
            self.list_kind("LeaderWorkerSet", lws[0]["apiVersion"]) if lws else None,
        )

    def logs(self, unit: str | None, follow: bool, lines: int, write: Write) -> None:
        pod_logs(self, unit, lines, follow, write)
