"""Cluster rules: allocatable GPUs or HAMi slices for the plan, HAMi present and healthy for
phase 3, CRDs installed for what phase 2 renders, node drivers. Pure."""

from __future__ import annotations

from pdctl.check.finding import Finding
from pdctl.facts.model import ClusterFacts, Node
from pdctl.plan.model import Plan
from pdctl.render.pd_kube import HAMI_SCHEDULER

# API groups served by Kubernetes itself; any other group in a rendered object needs a CRD.
BUILTIN_GROUPS = frozenset({
    "", "apps", "batch", "policy", "autoscaling", "networking.k8s.io",
    "rbac.authorization.k8s.io", "storage.k8s.io", "scheduling.k8s.io", "coordination.k8s.io",
    "admissionregistration.k8s.io", "apiextensions.k8s.io", "certificates.k8s.io",
    "discovery.k8s.io", "node.k8s.io", "events.k8s.io", "apiregistration.k8s.io",
})
HINTS = {
    "inference.networking.k8s.io": "the Gateway API Inference Extension CRDs (InferencePool v1)",
    "gateway.networking.k8s.io": "the Gateway API CRDs (standard channel)",
    "leaderworkerset.x-k8s.io": "LeaderWorkerSet (its release manifests)",
}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def required_kinds(plan: Plan) -> tuple[tuple[str, str], ...]:
    """(group, kind) of the custom resources the plan's bundle holds (the plan decides them)."""
    return tuple(k for k in plan.kinds if k[0] not in BUILTIN_GROUPS)


def _usable(n: Node) -> bool:
    return n.ready and not n.unschedulable


def gpus(plan: Plan, c: ClusterFacts) -> list[Finding]:
    sliced = plan.phase == 3
    whole = [i for i in plan.instances if i.gpu_count and not (sliced and i.role == "decode")]
    if not whole:
        return []
    per_pod = max(i.gpu_count for i in whole)
    total = sum(i.gpu_count * i.replicas for i in whole)

    def physical(n: Node) -> int:
        # On HAMi nodes nvidia.com/gpu counts vGPUs; whole GPUs are the registered devices.
        return len(n.hami_devices) if n.hami_devices else n.allocatable_gpus

    nodes = [n for n in c.nodes if _usable(n) and physical(n) > 0]
    have = sum(physical(n) for n in nodes)
    biggest = max((physical(n) for n in nodes), default=0)
    want = f"{total} whole GPUs, {per_pod} on one node"
    found = f"{have} allocatable GPUs on {len(nodes)} ready nodes (largest {biggest})"
    if have < total or biggest < per_pod:
        return [Finding("FAIL", "cluster.gpus", "cluster", found, want,
                        "add GPU nodes, lower replicas or tensorParallel")]
    out = [Finding("PASS", "cluster.gpus", "cluster", found, want)]
    mixed = [n.name for n in nodes if n.mig_strategy == "mixed" and n.mig_resources]
    if mixed:
        out.append(Finding("WARN", "cluster.mig", "cluster",
                           f"MIG strategy mixed on {', '.join(mixed)}",
                           "whole GPUs as nvidia.com/gpu",
                           "pods asking nvidia.com/gpu do not get MIG slices there; pin "
                           "kubernetes.nodeSelector to non-MIG nodes"))
    return out


def hami(plan: Plan, c: ClusterFacts) -> list[Finding]:
    if plan.phase != 3:
        return []
    out = []
    registered = [n for n in c.nodes if n.hami_devices]
    broken = [n for n in c.nodes if n.hami_error]
    for n in broken:
        out.append(Finding("FAIL", "hami.register", n.name, n.hami_error,
                           "a readable hami.io/node-nvidia-register annotation"))
    if not registered:
        out.append(Finding("FAIL", "hami.register", "cluster",
                           "no node carries hami.io/node-nvidia-register",
                           "HAMi's device plugin registering GPUs",
                           "install HAMi (helm install hami hami-charts/hami) and label GPU "
                           "nodes gpu=on"))
        return out
    for n in registered:
        sick = [d.id for d in n.hami_devices or () if not d.health]
        if sick:
            out.append(Finding("WARN", "hami.health", n.name,
                               f"unhealthy: {', '.join(sick)}", "every device health: true",
                               "HAMi skips these devices; check the device plugin's log "
                               "on the node"))
        else:
            devs = n.hami_devices or ()
            out.append(Finding("PASS", "hami.health", n.name,
                               f"{len(devs)} GPUs registered, healthy "
                               f"(split {max(d.count for d in devs)})", "healthy devices"))
    odd = sorted({f"{n.name}: {d.mode}" for n in registered for d in n.hami_devices or ()
                  if d.mode not in ("", "hami-core")})
    if odd:
        out.append(Finding("WARN", "hami.mode", "cluster", "device mode " + ", ".join(odd),
                           "hami-core (memory-capped slices, what decode.share sizes)",
                           "set operatingmode: hami-core for these nodes in the "
                           "hami-device-plugin ConfigMap, or keep decode off them"))
    if c.workloads is None:
        out.append(Finding("WARN", "hami.workloads", "cluster",
                           "HAMi workloads: not gathered", "hami-scheduler, hami-device-plugin"))
    else:
        for comp in ("hami-scheduler", "hami-device-plugin"):
            ws = [w for w in c.workloads if w.component == comp]
            if not ws:
                out.append(Finding("FAIL", "hami.workloads", "cluster", f"no {comp}",
                                   f"{comp} running", "install HAMi"))
            elif any(w.ready < max(1, w.desired) for w in ws):
                w = ws[0]
                out.append(Finding("FAIL", "hami.workloads", f"{w.namespace}/{w.name}",
                                   f"{w.kind} {w.ready}/{w.desired} ready", "all ready",
                                   f"kubectl -n {w.namespace} describe {w.kind.lower()} {w.name}"))
            else:
                w = ws[0]
                out.append(Finding("PASS", "hami.workloads", f"{w.namespace}/{w.name}",
                                   f"{w.kind} {w.ready}/{w.desired} ready", "all ready"))
    out += _allocatable(registered)
    out += _scheduler(c)
    out += _versions(c, registered)
    out += _slices(plan, registered, c.nodes)
    return out


def _allocatable(registered: list[Node]) -> list[Finding]:
    """A node HAMi registers GPUs on must also advertise nvidia.com/gpu (HAMi's own device
    plugin does, counting vGPUs): 0 means the kubelet never got HAMi's resources."""
    return [
        Finding("FAIL", "hami.allocatable", n.name,
                f"{len(n.hami_devices or ())} GPUs registered, nvidia.com/gpu allocatable 0",
                "nvidia.com/gpu > 0 (HAMi's device plugin advertises it)",
                "check hami-device-plugin on the node; disable any other NVIDIA device plugin "
                "there (both advertise nvidia.com/gpu)")
        for n in registered
        if n.allocatable_gpus == 0
    ]


def _scheduler(c: ClusterFacts) -> list[Finding]:
    """The bundle's decode pods name schedulerName hami-scheduler: the scheduler must run under
    that name (known when its kube-scheduler takes --scheduler-name; a config file is not read)."""
    out = []
    for w in c.workloads or ():
        if w.component != "hami-scheduler" or not w.scheduler_name:
            continue
        where = f"{w.namespace}/{w.name}"
        if w.scheduler_name == HAMI_SCHEDULER:
            out.append(Finding("PASS", "hami.scheduler", where,
                               f"--scheduler-name={w.scheduler_name}",
                               f"schedulerName {HAMI_SCHEDULER} (the decode pods ask for it)"))
        else:
            out.append(Finding("FAIL", "hami.scheduler", where,
                               f"--scheduler-name={w.scheduler_name}",
                               f"schedulerName {HAMI_SCHEDULER} (the decode pods ask for it)",
                               f"install HAMi with schedulerName: {HAMI_SCHEDULER} (chart "
                               "value); pods naming a scheduler nobody runs stay Pending"))
    return out


def _versions(c: ClusterFacts, registered: list[Node]) -> list[Finding]:
    """HAMi's parts from one release: the device plugin of 2.8 writes its registration as JSON,
    which a scheduler before 2.8 cannot read (it parses the older comma/colon list)."""
    found = {w.component: w.version for w in c.workloads or () if w.version}
    sched, plugin = found.get("hami-scheduler", ""), found.get("hami-device-plugin", "")
    if not sched and not plugin:
        return []
    text = f"hami-scheduler {sched or '?'}, hami-device-plugin {plugin or '?'}"
    json_nodes = [n.name for n in registered if n.hami_format == "json"]
    if sched and _version(sched) < (2, 8) and json_nodes:
        return [Finding("FAIL", "hami.version", "cluster",
                        f"{text}; JSON device registration on {', '.join(json_nodes)}",
                        "a scheduler that reads the nodes' registration (>= 2.8 for JSON)",
                        "upgrade hami-scheduler to the device plugin's release (one helm "
                        "release for both)")]
    if sched and plugin and sched != plugin:
        return [Finding("WARN", "hami.version", "cluster", text, "one HAMi release",
                        "upgrade both with one helm release")]
    return [Finding("PASS", "hami.version", "cluster", text, "one HAMi release")]


def _slices(plan: Plan, registered: list[Node], nodes: tuple[Node, ...]) -> list[Finding]:
    decode = plan.spec.decode
    share = decode.share if decode is not None else None
    if decode is None or share is None:
        return []
    from pdctl.capacity.slice import slice_size

    slots = 0
    sizes = []
    for n in registered:
        for d in n.hami_devices or ():
            if not d.health:
                continue
            size = slice_size(d.devmem, share.per_gpu, share.gpu_memory_percent,
                              share.gpu_memory_mib)
            sizes.append(size)
            slots += min(d.count, d.devmem // size if size else 0, share.per_gpu)
    prefill_gpus = sum(i.gpu_count * i.replicas for i in plan.instances if i.role == "prefill")
    plain = sum(n.allocatable_gpus for n in nodes if _usable(n) and not n.hami_devices)
    prefill_on_hami = max(0, prefill_gpus - plain)  # whole GPUs that must come from HAMi nodes
    need = decode.replicas
    found = f"{slots} decode slices of {min(sizes) if sizes else 0} MiB on healthy devices"
    want = (f"{need} decode slices ({share.per_gpu} per GPU) besides {prefill_on_hami} "
            "prefill GPUs on HAMi nodes")
    free_slots = slots - prefill_on_hami * share.per_gpu
    if free_slots < need:
        return [Finding("FAIL", "hami.slices", "cluster", found, want,
                        "raise decode.share.perGpu, add GPUs, or lower decode.replicas")]
    return [Finding("PASS", "hami.slices", "cluster", found, want)]


def crds(plan: Plan, c: ClusterFacts) -> list[Finding]:
    needed = required_kinds(plan) if plan.phase in (2, 3) else ()
    if not needed:
        return []
    if c.crds is None:
        return [Finding("WARN", "cluster.crds", "cluster", "CRDs: not gathered",
                        ", ".join(k for _, k in needed))]
    have = {(d.group, d.kind) for d in c.crds}
    out = []
    for group, kind in needed:
        if (group, kind) in have:
            out.append(Finding("PASS", "cluster.crds", "cluster", f"{kind}.{group} installed",
                               f"CRD {kind} ({group})"))
        else:
            out.append(Finding("FAIL", "cluster.crds", "cluster", f"no CRD for {kind}.{group}",
                               f"CRD {kind} ({group})",
                               "install " + HINTS.get(group, f"the CRD defining {kind}")))
    return out


def drivers(plan: Plan, c: ClusterFacts) -> list[Finding]:
    rel = plan.release
    old = [f"{n.name} ({n.driver})" for n in c.nodes
           if n.driver and _version(n.driver) < _version(rel.min_driver)]
    if old:
        return [Finding("WARN", "cluster.driver", "cluster", "old drivers: " + ", ".join(old),
                        f">= {rel.min_driver} (CUDA {rel.cuda_major})",
                        "keep engine pods off those nodes (kubernetes.nodeSelector), upgrade "
                        "their driver, or pin an older engine.version")]
    return []


def cluster(plan: Plan, c: ClusterFacts | None) -> list[Finding]:
    if c is None:
        return [Finding("FAIL", "cluster.reach", "cluster", "no cluster facts",
                        "a reachable cluster", "check --kubeconfig / --context")]
    if c.error:
        return [Finding("FAIL", "cluster.reach", "cluster", c.error, "a reachable cluster",
                        "check --kubeconfig / --context")]
    out = [Finding("WARN", "cluster.facts", "cluster", f"{m.name}: {m.reason}", "readable")
           for m in c.missing]
    return out + gpus(plan, c) + drivers(plan, c) + hami(plan, c) + crds(plan, c)
