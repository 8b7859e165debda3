"""What `pdctl status` and `pdctl logs` show of a Kubernetes deployment: its Deployments
(rollout state, ready/desired) and pods (phase, node, readiness, and why one is not ready:
the scheduler's message, an image pull or crash loop with the last log line), and pod logs."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from pdctl.errors import PdctlError
from pdctl.targets.base import StatusRow

if TYPE_CHECKING:
    from pdctl.targets.kube.api import KubeApi


def rolled_out(dep: dict[str, Any] | None, ready: str = "availableReplicas") -> bool:
    """A Deployment (or, with `readyReplicas`, a LeaderWorkerSet: a group is ready when all
    of its pods are) is rolled out when its controller saw the current generation and every
    replica is updated and available (ready)."""
    if not dep:
        return False
    meta, spec, st = dep.get("metadata") or {}, dep.get("spec") or {}, dep.get("status") or {}
    want = spec.get("replicas", 1)
    return st.get("observedGeneration", 0) >= meta.get("generation", 1) and all(
        st.get(key, 0) == want for key in ("updatedReplicas", ready, "replicas")
    )


groups_ready = partial(rolled_out, ready="readyReplicas")


def rollout_state(dep: dict[str, Any]) -> str:
    """rolled out | progressing | failed: <why> (the Deployment's Progressing condition)."""
    if rolled_out(dep):
        return "rolled out"
    for cond in (dep.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("status") == "False":
            return f"failed: {cond.get('reason', '')}: {cond.get('message', '')}".rstrip(": ")
    return "progressing"


def pod_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def events_by_pod(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Warning events per Pod name, newest last."""
    out: dict[str, list[dict[str, Any]]] = {}
    for ev in events:
        obj = ev.get("involvedObject") or ev.get("regarding") or {}
        if obj.get("kind", "Pod") == "Pod" and ev.get("type") == "Warning":
            out.setdefault(obj.get("name", ""), []).append(ev)
    for evs in out.values():
        evs.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return out


def pod_reason(
    pod: dict[str, Any], events: list[dict[str, Any]], last_log: Callable[[str], str]
) -> str:
    """Why a pod is not ready, in one line: Pending with the scheduler's message (from the
    PodScheduled condition, else the pod's latest warning event), a waiting container's
    reason and message (ImagePullBackOff ...), CrashLoopBackOff with the last line of the
    previous run's log (`last_log(container)`), or the latest warning event. "" if ready."""
    if pod_ready(pod):
        return ""
    st = pod.get("status") or {}
    for cond in st.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            why = cond.get("message") or cond.get("reason") or "not scheduled"
            return f"Pending: {why}"
    statuses = (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or [])
    for cs in statuses:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if not reason or reason in ("ContainerCreating", "PodInitializing"):
            continue
        if reason == "CrashLoopBackOff":
            term = (cs.get("lastState") or {}).get("terminated") or {}
            code = term.get("exitCode")
            head = f"CrashLoopBackOff: {cs.get('name')} restarted {cs.get('restartCount', 0)} times"
            head += f", last exit code {code}" if code is not None else ""
            line = last_log(cs.get("name", ""))
            return f"{head}; its log ends: {line}" if line else head
        message = waiting.get("message")
        return f"{reason}: {message}" if message else reason
    warned = events_by_pod(events).get((pod.get("metadata") or {}).get("name", ""))
    if warned:
        ev = warned[-1]
        return f"{ev.get('reason', 'Warning')}: {ev.get('message') or ev.get('note') or ''}"
    return st.get("phase", "")


def no_log(_container: str) -> str:
    return ""


def lws_state(lws: dict[str, Any]) -> str:
    """rolled out | progressing, for a LeaderWorkerSet (groups updated and ready)."""
    return "rolled out" if groups_ready(lws) else "progressing"


def status_rows(
    deployments: list[dict[str, Any]], pods: list[dict[str, Any]],
    events: list[dict[str, Any]] | None = None, last_log: Callable[[str, str], str] | None = None,
    leader_worker_sets: list[dict[str, Any]] | None = None,
) -> list[StatusRow]:
    """Workloads (kind "rollout": Deployments and LeaderWorkerSets with their rollout state,
    ready/desired replicas or groups) then pods (phase, and why one is not ready): host is the
    pod's node."""
    rows = []
    workloads = [(d, rollout_state(d), "") for d in deployments] + [
        (w, lws_state(w), " groups") for w in leader_worker_sets or []
    ]
    for obj, state, what in workloads:
        st = obj.get("status") or {}
        spec = obj.get("spec") or {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        rows.append(
            StatusRow(
                host="-", unit=obj["metadata"]["name"],
                role=labels.get("app.kubernetes.io/component", "-"), pid="-",
                state=f"{st.get('readyReplicas', 0)}/{spec.get('replicas', 1)}{what} ready",
                health="healthy" if state == "rolled out" else "not ready", model="", endpoint="",
                why="" if state == "rolled out" else state, kind="rollout",
            )
        )
    for pod in pods:
        st = pod.get("status") or {}
        name = pod["metadata"]["name"]
        labels = pod["metadata"].get("labels") or {}
        ready = pod_ready(pod)
        logs: Callable[[str], str] = partial(last_log, name) if last_log else no_log
        rows.append(
            StatusRow(
                host=(pod.get("spec") or {}).get("nodeName", "-"), unit=name,
                role=labels.get("app.kubernetes.io/component", "-"), pid="-",
                state=st.get("phase", "-"), health="healthy" if ready else "not ready", model="",
                endpoint="", why="" if ready else pod_reason(pod, events or [], logs),
            )
        )
    return rows


def pod_logs(
    tgt: KubeApi, unit: str | None, lines: int, follow: bool, write: Callable[[str], Any]
) -> None:
    """The logs of `tgt`'s pods whose name starts with `unit` (all without), or follow one."""
    names = [
        p["metadata"]["name"]
        for p in tgt.pods()
        if unit is None or p["metadata"]["name"].startswith(unit)
    ]
    if not names:
        raise PdctlError(f"no pods of {tgt.name!r} match {unit or 'any unit'}")
    from kubernetes import client

    core = client.CoreV1Api(tgt.api)
    for name in names if not follow else names[:1]:
        if follow:
            stream: Any = core.read_namespaced_pod_log(
                name, tgt.namespace, follow=True, tail_lines=lines, _preload_content=False
            )
            for chunk in stream.stream():
                write(chunk.decode("utf-8", "replace"))
            return
        write(core.read_namespaced_pod_log(name, tgt.namespace, tail_lines=lines))
