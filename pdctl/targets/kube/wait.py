"""`up` on Kubernetes waits here until every Deployment has rolled out: each poll reports the
stage of every pod (scheduling, pulling image, failing, and for a running engine the stage its
log tells: loading weights, compiling ...; pdctl.targets.stages) with the latest line, and a
rollout that times out, or that the controller gave up on, fails with the first pod's reason
in one line (Pending with the scheduler's message, ImagePullBackOff, CrashLoopBackOff and the
last log line)."""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

from pdctl.errors import PdctlError
from pdctl.targets.base import Stage
from pdctl.targets.kube.discovery import ApiError
from pdctl.targets.kube.status import groups_ready, pod_reason, rolled_out, rollout_state
from pdctl.targets.stages import latest_line, pod_stage, stage_of

if TYPE_CHECKING:
    from pdctl.targets.kube.api import KubeApi


def wait(tgt: KubeApi, objs: list[dict[str, Any]], timeout: float, poll: float = 2.0) -> None:
    """Wait until every Deployment has rolled out (updated, available, observed),
    reporting each pod's stage meanwhile; on the timeout, or a rollout the controller
    gave up on, fail with the reason of the first pod that is not ready."""
    start = time.monotonic()
    kinds = {o["metadata"]["name"]: o["kind"] for o in objs if o["kind"] in WORKLOADS}
    pending = list(kinds)
    while pending:
        for name in list(pending):
            kind = kinds[name]
            dep = tgt.get(kind, name, api_version=WORKLOADS[kind])
            if (rolled_out if kind == "Deployment" else groups_ready)(dep):
                pending.remove(name)
                tgt.say(f"{kind}/{name} rolled out")
            elif dep and kind == "Deployment" and rollout_state(dep).startswith("failed"):
                raise PdctlError(f"Deployment/{name} {rollout_state(dep)}{why(tgt, name)}")
        if not pending:
            return
        elapsed = time.monotonic() - start
        reason = report(tgt, pending, elapsed, timeout)
        if elapsed > timeout:
            raise PdctlError(
                f"{kinds[pending[0]]}/{pending[0]} not rolled out after {int(timeout)} s"
                f"{reason}; see `pdctl status` and `pdctl logs`"
            )
        time.sleep(poll)


# What `up` waits for: Deployments, and LeaderWorkerSets (multi-node instances, render/lws.py).
WORKLOADS = {"Deployment": "apps/v1", "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1"}


def report(tgt: KubeApi, deployments: list[str], elapsed: float, timeout: float) -> str:
    """Report the stage of each pod of `deployments`; answer ": <pod>: <reason>" for the
    pod that is not ready that says most (a pod that cannot schedule or start before one
    that is still starting; "" when none is known)."""
    pods = [
        p for p in tgt.pods() if any(p["metadata"]["name"].startswith(f"{d}-") for d in deployments)
    ]
    events = tgt.events() if pods else []
    found: list[tuple[int, str]] = []
    for pod in pods:
        name = pod["metadata"]["name"]
        stage = pod_stage(pod, events)
        reason = pod_reason(pod, events, partial(tgt.last_log_line, name))
        line = reason
        if stage == "starting":  # the engine runs: its log tells how far it is
            logs = pod_log(tgt, pod)
            stage, line = stage_of(logs, "starting"), latest_line(logs)
            reason = f"not ready yet ({stage})" + (f": {line}" if line else "")
        node = (pod.get("spec") or {}).get("nodeName") or "-"
        tgt.stage(Stage(name, node, stage, line, elapsed, timeout))
        if stage != "healthy" and reason:
            found.append((0 if stage in ("failing", "scheduling") else 1, f": {name}: {reason}"))
    return min(found)[1] if found else ""


def why(tgt: KubeApi, deployment: str) -> str:
    pods = [p for p in tgt.pods() if p["metadata"]["name"].startswith(f"{deployment}-")]
    events = tgt.events() if pods else []
    for pod in pods:
        name = pod["metadata"]["name"]
        reason = pod_reason(pod, events, partial(tgt.last_log_line, name))
        if reason:
            return f": {name}: {reason}"
    return ""


def pod_log(tgt: KubeApi, pod: dict[str, Any]) -> str:
    """The last lines of the pod's first container's current log ("" when there is none)."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    query = [("tailLines", "50")]
    if containers[0].get("name"):
        query.append(("container", containers[0]["name"]))
    path = f"/api/v1/namespaces/{tgt.namespace}/pods/{pod['metadata']['name']}/log"
    try:
        return tgt._call("GET", path, query=query, as_text=True) or ""
    except ApiError:
        return ""


def wait_gone(tgt: KubeApi, timeout: float, poll: float = 2.0) -> None:
    """After `down` deleted the objects: wait until no pod of the deployment is left,
    reporting each as `terminating`; one line naming those left after `timeout`."""
    start = time.monotonic()
    while True:
        pods = tgt.pods()
        if not pods:
            return
        elapsed = time.monotonic() - start
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName") or "-"
            tgt.stage(Stage(pod["metadata"]["name"], node, "terminating", "", elapsed, timeout))
        if elapsed > timeout:
            names = ", ".join(sorted(p["metadata"]["name"] for p in pods))
            raise PdctlError(
                f"deleted the objects of {tgt.name!r}, but pods still run after "
                f"{int(timeout)} s: {names}; see `pdctl status`, and `kubectl delete pod` if "
                "one is stuck (a finalizer, a node that does not answer)"
            )
        time.sleep(poll)
