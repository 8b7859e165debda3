"""Where `pdctl top`'s figures come from (I/O): each instance's /metrics and the GPUs.

Hosts: over the SSH connections `up` uses (pdctl.targets.hosts.fleet), /metrics through SSH
port forwarding as the health probe reaches the engines, GPU telemetry by running
nvml_probe.py with the host's python3. Kubernetes: the pods through the API server's proxy
(`/api/v1/namespaces/NS/pods/POD:PORT/proxy/metrics`), GPUs from dcgm-exporter's pods when the
cluster runs it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pdctl.top.gpu import GpuLoad, parse_dcgm, parse_probe, probe_command
from pdctl.top.metrics import Snapshot, parse


@dataclass(frozen=True)
class Endpoint:
    """One /metrics to read: an engine or the router."""

    name: str
    role: str
    where: str  # host name or pod name
    port: int
    address: str = "127.0.0.1"  # as seen from the host (hosts target)
    max_num_seqs: int | None = None
    gpus: tuple[tuple[str, int], ...] = ()


def host_endpoints(plan: Any, bundle: Any) -> list[Endpoint]:
    """Every engine unit with a port, and the router's metrics port (pure)."""
    from pdctl.targets.state import desired_units

    insts = {i.name: i for i in plan.instances}
    out = []
    for d in desired_units(plan, bundle):
        if d.role == "router":
            out.append(
                Endpoint(d.name, "router", d.host.name, plan.spec.router.metrics_port, d.address)
            )
            continue
        inst = insts.get(d.name)
        if inst is None or d.port is None:
            continue
        gpus = tuple((d.host.name, g) for g in inst.gpus)
        out.append(
            Endpoint(d.name, d.role, d.host.name, d.port, d.address, inst.max_num_seqs, gpus)
        )
    return sorted(out, key=lambda e: (e.role != "router", e.role, e.name))


def router_workers(plan: Any) -> dict[str, tuple[str, str]]:
    """The engine URLs the router is given (plan.router.engine_url) -> (instance, role)."""
    from pdctl.plan.router import engine_url

    return {
        engine_url(i): (i.name, i.role)
        for i in plan.instances
        if i.role in ("prefill", "decode") and i.host is not None
    }


def gpu_roles(plan: Any) -> dict[tuple[str, int], tuple[str, ...]]:
    roles: dict[tuple[str, int], set[str]] = {}
    for inst in plan.instances:
        if inst.host is not None:
            for g in inst.gpus:
                roles.setdefault((inst.host.name, g), set()).add(inst.role)
    return {k: tuple(sorted(v)) for k, v in roles.items()}


@dataclass
class HostSource:
    """Reads a hosts deployment; `close()` when done."""

    plan: Any
    bundle: Any
    options: Any
    parallel: int = 8
    endpoints: list[Endpoint] = field(default_factory=list)
    fleet: Any = None  # the SSH connections (pdctl.targets.hosts.fleet.Fleet)
    workers: dict[str, tuple[str, str]] = field(default_factory=dict)

    def open(self) -> HostSource:
        from pdctl.targets.hosts.fleet import fleet_of

        self.endpoints = host_endpoints(self.plan, self.bundle)
        self.workers = router_workers(self.plan)
        self.fleet = fleet_of(self.plan, self.bundle, self.options, self.parallel)
        self.fleet.connect(tolerate=True)
        return self

    def close(self) -> None:
        if self.fleet is not None:
            self.fleet.close()

    @property
    def unreachable(self) -> dict[str, str]:
        return dict(self.fleet.unreachable) if self.fleet is not None else {}

    def scrape(self) -> dict[str, Snapshot]:
        from pdctl.targets.health import http_get, unanswered

        def one(e: Endpoint) -> tuple[str, Snapshot]:
            ops = self.fleet.ops.get(e.where)
            if ops is None:
                return e.name, Snapshot(time.monotonic(), (), f"host {e.where} unreachable")
            try:
                status, body = http_get(ops.conn.open_channel(e.port, e.address), "/metrics")
            except Exception as exc:  # refused, reset, timeout, host lost
                why = unanswered(exc, f"{e.address}:{e.port} on {e.where}")
                return e.name, Snapshot(time.monotonic(), (), f"/metrics: no answer ({why})")
            at = time.monotonic()
            if status != 200:
                return e.name, Snapshot(at, (), f"/metrics answered {status}")
            return e.name, parse(body, at)

        return dict(self.fleet.map(one, self.endpoints))

    def router_readiness(self) -> dict[str, dict[str, tuple[int, int]]]:
        """Each running router's own view of its workers (`GET /readiness` on its port, as
        top.router.readiness reads it): router unit -> role -> (healthy, total); a router
        that does not answer, or answers without counts, is left out."""
        from pdctl.targets.health import http_get
        from pdctl.targets.state import desired_units
        from pdctl.top.router import readiness

        out = {}
        for d in desired_units(self.plan, self.bundle):
            ops = self.fleet.ops.get(d.host.name)
            if d.role != "router" or d.port is None or ops is None:
                continue
            try:
                status, body = http_get(ops.conn.open_channel(d.port, d.address), "/readiness")
            except Exception:  # not answering: status says so from its own probe
                continue
            view = readiness(status, body)
            if view is not None:
                out[d.name] = view
        return out

    def logs(self, lines: int = 2000) -> dict[str, str]:
        """The last `lines` of every engine's log (one exec per host; '' where a host or a
        log cannot be read): what top/kv_events.py scans for suspect KV events."""
        by_host: dict[str, list[str]] = {}
        for e in self.endpoints:
            if e.role != "router" and e.where in self.fleet.ops:
                by_host.setdefault(e.where, []).append(e.name)

        def one(host: str) -> dict[str, str]:
            try:
                return self.fleet.ops[host].tails(by_host[host], lines, missing_ok=True)
            except Exception:  # a host lost meanwhile: its scrape says so
                return {}

        out: dict[str, str] = {}
        for got in self.fleet.map(one, sorted(by_host)):
            out.update(got)
        return out

    def gpus(self, window_s: float) -> tuple[list[GpuLoad], list[str]]:
        """Every used host's GPUs over `window_s` seconds (blocks that long)."""
        roles = gpu_roles(self.plan)
        hosts = [h.name for h in self.plan.hosts_used() if h.name in self.fleet.ops]

        def one(name: str) -> tuple[list[GpuLoad], list[str]]:
            try:
                res = self.fleet.ops[name].conn.run(
                    probe_command(window_s), timeout=window_s + 60, step="reading GPU telemetry"
                )
            except Exception as exc:
                return [], [f"{name}: GPU telemetry: {exc}"]
            gpus, errors = parse_probe(name, res.out)
            if res.rc != 0 and not gpus:
                errors.append(f"{name}: GPU probe exited {res.rc}: {res.err.strip()[-200:]}")
            out = [with_roles(g, roles.get((g.host, g.index), ())) for g in gpus]
            return out, [f"{name}: {e}" for e in errors if not e.startswith(name)]

        start = time.monotonic()
        gpus: list[GpuLoad] = []
        missing: list[str] = []
        for g, m in self.fleet.map(one, hosts):
            gpus += g
            missing += m
        # a host without GPUs answers at once: the window still lasts window_s
        time.sleep(max(0.0, window_s - (time.monotonic() - start)))
        return gpus, missing


def with_roles(g: GpuLoad, roles: tuple[str, ...]) -> GpuLoad:
    from dataclasses import replace

    return replace(g, roles=roles)


DCGM_SELECTORS = ("app=nvidia-dcgm-exporter", "app.kubernetes.io/name=dcgm-exporter")
DCGM_PORT = 9400


@dataclass
class KubeSource:
    """Reads a Kubernetes deployment through the API server (pod proxy)."""

    plan: Any
    api: Any
    endpoints: list[Endpoint] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)
    workers: dict[str, tuple[str, str]] = field(default_factory=dict)  # no vllm-router here
    _core: Any = None
    _ns: str = ""

    def open(self) -> KubeSource:
        from kubernetes import client

        core: Any = client.CoreV1Api(self.api)
        ns = self.plan.spec.kubernetes.namespace
        by_role: dict[str, Any] = {}
        for inst in self.plan.instances:
            by_role.setdefault(inst.role, inst)
        pods: list[Any] = core.list_namespaced_pod(
            ns, label_selector=f"app.kubernetes.io/instance={self.plan.name}"
        ).items
        out = []
        for pod in pods:
            labels = pod.metadata.labels or {}
            if labels.get("app.kubernetes.io/instance") != self.plan.name:
                continue  # the selector again: not every server applies it
            role = labels.get("app.kubernetes.io/component", "")
            inst = by_role.get(role)
            if inst is None:
                continue
            port = inst.container_port or inst.port
            out.append(
                Endpoint(
                    pod.metadata.name,
                    role,
                    pod.spec.node_name or pod.metadata.name,
                    port,
                    max_num_seqs=inst.max_num_seqs,
                )
            )
        self.endpoints = sorted(out, key=lambda e: (e.role, e.name))
        self._core = core
        self._ns = ns
        return self

    def close(self) -> None:
        pass

    def _get(self, ns: str, pod: str, port: int) -> Snapshot:
        try:
            body = self._core.connect_get_namespaced_pod_proxy_with_path(
                f"{pod}:{port}", ns, "metrics", _preload_content=False
            ).data.decode("utf-8", "replace")
        except Exception as exc:
            status = getattr(exc, "status", None)
            why = f"answered {status}" if status else f"no answer ({type(exc).__name__})"
            return Snapshot(time.monotonic(), (), f"/metrics through the API server {why}")
        return parse(body, time.monotonic())

    def scrape(self) -> dict[str, Snapshot]:
        return {e.name: self._get(self._ns, e.name, e.port) for e in self.endpoints}

    def gpus(self, window_s: float) -> tuple[list[GpuLoad], list[str]]:
        time.sleep(window_s)
        found: list[Any] = []
        for selector in DCGM_SELECTORS:
            try:
                found = self._core.list_pod_for_all_namespaces(label_selector=selector).items
            except Exception:
                found = []
            key, _, value = selector.partition("=")
            found = [p for p in found if (p.metadata.labels or {}).get(key) == value]
            if found:
                break
        if not found:
            return [], [
                "dcgm-exporter not found in the cluster (labels "
                + " or ".join(DCGM_SELECTORS)
                + "): no GPU telemetry"
            ]
        gpus: list[GpuLoad] = []
        missing = []
        for pod in found:
            snap = self._get(pod.metadata.namespace, pod.metadata.name, DCGM_PORT)
            if snap.error:
                missing.append(f"dcgm-exporter {pod.metadata.name}: {snap.error}")
            gpus += parse_dcgm(snap)
        return gpus, missing
