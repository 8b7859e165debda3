"""A running deployment on Kubernetes read through the API server: its pods by label, each
pod's port through the pod proxy (`/api/v1/namespaces/NS/pods/POD:PORT/proxy/PATH`), GPUs
from dcgm-exporter's pods when the cluster runs it."""

from __future__ import annotations

import time
from typing import Any

from pdctl.plan.model import Plan
from pdctl.targets.base import Endpoint, Reply, Telemetry

DCGM_SELECTORS = ("app=nvidia-dcgm-exporter", "app.kubernetes.io/name=dcgm-exporter")
DCGM_PORT = 9400


class KubeObserver:
    workers: dict[str, tuple[str, str]] = {}  # noqa: RUF012 (no vllm-router here)
    unreachable: dict[str, str] = {}  # noqa: RUF012 (a cluster is one endpoint: it raises)

    def __init__(self, target: Any, plan: Plan) -> None:  # KubeTarget, which imports this
        from kubernetes import client

        self.close = target.close
        self.core: Any = client.CoreV1Api(target.api)
        self.ns = plan.spec.kubernetes.namespace
        by_role: dict[str, Any] = {}
        for one in plan.instances:
            by_role.setdefault(one.role, one)
        pods: list[Any] = self.core.list_namespaced_pod(
            self.ns, label_selector=f"app.kubernetes.io/instance={plan.name}"
        ).items
        out = []
        for pod in pods:
            labels = pod.metadata.labels or {}
            if labels.get("app.kubernetes.io/instance") != plan.name:
                continue  # the selector again: not every server applies it
            role = labels.get("app.kubernetes.io/component", "")
            inst = by_role.get(role)
            if inst is None:
                continue
            port = inst.container_port or inst.port
            where = pod.spec.node_name or pod.metadata.name
            out.append(Endpoint(pod.metadata.name, role, where, port, "", inst.max_num_seqs))
        self.endpoints = sorted(out, key=lambda e: (e.role, e.name))

    def _get(self, ns: str, pod: str, port: int, path: str) -> Reply:
        try:
            body = self.core.connect_get_namespaced_pod_proxy_with_path(
                f"{pod}:{port}", ns, path.lstrip("/"), _preload_content=False
            ).data.decode("utf-8", "replace")
        except Exception as exc:
            status = getattr(exc, "status", None)
            why = f"answered {status}" if status else f"no answer ({type(exc).__name__})"
            return Reply(0, f"{path} through the API server {why}", time.monotonic())
        return Reply(200, body, time.monotonic())

    def request(self, e: Endpoint, path: str, method: str = "GET", body: bytes = b"",
                headers: dict[str, str] | None = None, timeout: float = 10.0) -> Reply:
        """GET only: the API server's proxy drops the Authorization header an API key needs."""
        return self._get(self.ns, e.name, e.port, path)

    def logs(self, lines: int = 2000) -> dict[str, str]:
        return {}

    def gpus(self, command: str, window_s: float) -> list[Telemetry]:
        time.sleep(window_s)  # dcgm-exporter's figures as the window ends
        found: list[Any] = []
        for selector in DCGM_SELECTORS:
            try:
                found = self.core.list_pod_for_all_namespaces(label_selector=selector).items
            except Exception:
                found = []
            key, _, value = selector.partition("=")
            found = [p for p in found if (p.metadata.labels or {}).get(key) == value]
            if found:
                break
        if not found:
            labels = " or ".join(DCGM_SELECTORS)
            why = f"dcgm-exporter not found in the cluster (labels {labels}): no GPU telemetry"
            return [Telemetry("", failed=why)]
        out = []
        for pod in found:
            name = pod.metadata.name
            got = self._get(pod.metadata.namespace, name, DCGM_PORT, "/metrics")
            failed = f"dcgm-exporter {name}: {got.text}" if got.status != 200 else ""
            out.append(Telemetry(name, got.text if not failed else "", "dcgm", failed))
        return out
