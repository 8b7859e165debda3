"""What `pdctl status` and `pdctl logs` show of a Kubernetes deployment: its Deployments
(ready/replicas, rolled out or not) and pods (phase, node, readiness), and pod logs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pdctl.errors import PdctlError
from pdctl.targets.base import StatusRow


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


def status_rows(deployments: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[StatusRow]:
    """Deployments (ready/replicas) then pods (phase): host is the pod's node, pid its
    readiness or phase."""
    rows = []
    for dep in deployments:
        st = dep.get("status") or {}
        spec = dep.get("spec") or {}
        labels = (dep.get("metadata") or {}).get("labels") or {}
        rows.append(
            StatusRow(
                host="-",
                unit=dep["metadata"]["name"],
                role=labels.get("app.kubernetes.io/component", "-"),
                pid="-",
                state=f"{st.get('readyReplicas', 0)}/{spec.get('replicas', 1)} ready",
                health="healthy" if rolled_out(dep) else "not ready",
                model="",
                endpoint="",
            )
        )
    for pod in pods:
        st = pod.get("status") or {}
        labels = pod["metadata"].get("labels") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in st.get("conditions") or []
        )
        rows.append(
            StatusRow(
                host=(pod.get("spec") or {}).get("nodeName", "-"),
                unit=pod["metadata"]["name"],
                role=labels.get("app.kubernetes.io/component", "-"),
                pid="-",
                state=st.get("phase", "-"),
                health="healthy" if ready else "not ready",
                model="",
                endpoint="",
            )
        )
    return rows


def pod_logs(
    tgt: Any, unit: str | None, lines: int, follow: bool, write: Callable[[str], Any]
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
