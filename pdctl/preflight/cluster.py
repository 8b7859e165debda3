"""Kubernetes clusters (phases 1 to 3): the probe (nodes, HAMi's workloads, CRDs through the
kubernetes client, imported in `gather` only; recorded as JSON in the shapes `kubectl get ...
-o json` prints), the parsers of those records (node JSON, HAMi's device registration
annotation: JSON since HAMi 2.8, comma/colon before) and the cluster checks: allocatable GPUs or
HAMi slices for the plan, HAMi present and healthy for phase 3, CRDs installed for what phase 2
renders, node drivers. All but `gather` (and what only it calls) are pure.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from pdctl.capacity.slice import slice_size
from pdctl.plan.model import Plan
from pdctl.preflight import facts
from pdctl.preflight.facts import ClusterFacts, ClusterWorkload, Crd, HamiDevice, Missing, Node
from pdctl.preflight.finding import Finding, PlanCheck
from pdctl.render.pd_kube import HAMI_SCHEDULER

REGISTER = "hami.io/node-nvidia-register"
GPU = "nvidia.com/gpu"
HAMI_COMPONENTS = ("hami-scheduler", "hami-device-plugin")
SELECTOR = "app.kubernetes.io/component in ({})".format(",".join(HAMI_COMPONENTS))


def _json(response: Any) -> dict[str, Any]:
    """The API server's own JSON (no client-side model validation in between)."""
    data = json.loads(response.data)
    return data if isinstance(data, dict) else {}


def _list(response: Any, kind: str, api_version: str) -> str:
    data = _json(response)
    for item in data.get("items", []):
        item.setdefault("kind", kind)
        item.setdefault("apiVersion", api_version)
    return json.dumps(data, indent=1, sort_keys=True)


def _crds(response: Any) -> str:
    # Names, groups and kinds only: full CRD schemas are large and not needed.
    items = [{"metadata": {"name": c.get("metadata", {}).get("name", "")},
              "spec": {"group": c.get("spec", {}).get("group", ""),
                       "names": {"kind": c.get("spec", {}).get("names", {}).get("kind", "")}}}
             for c in _json(response).get("items", [])]
    return json.dumps({"kind": "List", "items": items}, indent=1, sort_keys=True)


def gather(kubeconfig: str | None, context: str | None) -> dict[str, str]:
    """Raw cluster outputs; a failure becomes `<name>.err` (or `cluster.err`), never a crash."""
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError as exc:
        return {"cluster.err": f"the kubernetes package is not installed: {exc}\n"}
    try:
        config.load_kube_config(config_file=kubeconfig, context=context)
    except (ConfigException, OSError, TypeError) as exc:
        try:
            config.load_incluster_config()
        except ConfigException:
            return {"cluster.err": f"no Kubernetes configuration: {_why(kubeconfig, exc)}\n"}
    api = client.ApiClient()
    raw: dict[str, str] = {}
    calls = {
        "nodes.json": lambda: _list(
            client.CoreV1Api(api).list_node(_preload_content=False), "Node", "v1"),
        "workloads.json": lambda: _workloads(api, client),
        "crds.json": lambda: _crds(
            client.ApiextensionsV1Api(api).list_custom_resource_definition(_preload_content=False))}
    for name, call in calls.items():
        try:
            raw[name] = call()
        except Exception as exc:  # ApiException (403, 404), connection errors: record them
            status = getattr(exc, "status", None)
            reason = getattr(exc, "reason", None) or str(exc).splitlines()[0]
            raw[name + ".err"] = f"{status or 'error'}: {reason}\n"
    return raw


def _why(kubeconfig: str | None, exc: Exception) -> str:
    """Why no configuration loaded, naming the file(s) looked for when none exists (the
    client says only "Invalid kube-config file. No configuration found.")."""
    from pdctl.targets.kube.api import DEFAULT_KUBECONFIG
    from pdctl.targets.kube.errors import files_of

    files = kubeconfig or os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
    if not files_of(files)[0]:
        where = (
            "--kubeconfig" if kubeconfig else "$KUBECONFIG" if "KUBECONFIG" in os.environ else "")
        named = f" ({where})" if where else ""
        return f"{files}{named} does not exist, and this is not a pod (no in-cluster account)"
    return " ".join(str(exc).split())


def _workloads(api: Any, client: Any) -> str:
    apps = client.AppsV1Api(api)
    lists = (("Deployment", apps.list_deployment_for_all_namespaces),
             ("DaemonSet", apps.list_daemon_set_for_all_namespaces))
    items = []
    for kind, call in lists:
        for item in _json(call(label_selector=SELECTOR, _preload_content=False)).get("items", []):
            labels = item.get("metadata", {}).get("labels") or {}
            if labels.get("app.kubernetes.io/component") not in HAMI_COMPONENTS:
                continue  # servers that ignore the selector
            item["kind"] = kind
            item["apiVersion"] = "apps/v1"
            items.append(item)
    return json.dumps({"kind": "List", "items": items}, indent=1, sort_keys=True)


def quantity(value: object) -> int:
    """An integer resource quantity ('8', '8k' is not used for GPUs)."""
    m = re.match(r"^\s*(\d+)", str(value))
    return int(m.group(1)) if m else 0


def _truthy(value: object) -> bool:
    return value is True or str(value).lower() == "true"


def parse_hami_register(text: str) -> tuple[HamiDevice, ...]:
    """`hami.io/node-nvidia-register`: JSON (>= 2.8; zero fields omitted) or the older
    `UUID,count,devmem,devcore,type,numa,health[,index,mode]:...` list."""
    text = text.strip()
    if text.startswith("["):
        items = json.loads(text)
        return tuple(
            HamiDevice(
                id=str(d.get("id", "")), index=int(d.get("index", 0)), count=int(d.get("count", 0)),
                devmem=int(d.get("devmem", 0)), devcore=int(d.get("devcore", 0)),
                type=str(d.get("type", "")), numa=int(d.get("numa", 0)),
                mode=str(d.get("mode", "")), health=_truthy(d.get("health", False)))
            for d in items)
    devices = []
    for i, item in enumerate(p for p in text.split(":") if p.strip()):
        f = [x.strip() for x in item.split(",")]
        if len(f) < 7:
            raise ValueError(f"device {i} has {len(f)} fields, expected at least 7: {item!r}")
        devices.append(
            HamiDevice(id=f[0], count=int(f[1]), devmem=int(f[2]), devcore=int(f[3]), type=f[4],
                       numa=int(f[5]), health=_truthy(f[6]),
                       index=int(f[7]) if len(f) > 7 and f[7].isdigit() else i,
                       mode=f[8] if len(f) > 8 else ""))
    return tuple(devices)


def _label(labels: dict[str, str], *names: str) -> str:
    for n in names:
        if labels.get(n):
            return labels[n]
    return ""


def parse_node(obj: dict[str, Any]) -> Node:
    meta = obj.get("metadata", {})
    spec = obj.get("spec", {})
    status = obj.get("status", {})
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    alloc = status.get("allocatable") or {}
    cap = status.get("capacity") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or [])
    driver = _label(labels, "nvidia.com/cuda.driver-version.full")
    if not driver:
        parts = [
            _label(labels, f"nvidia.com/cuda.driver-version.{p}", f"nvidia.com/cuda.driver.{q}")
            for p, q in (("major", "major"), ("minor", "minor"), ("revision", "rev"))]
        driver = ".".join(p for p in parts if p) if parts[0] else ""
    hami: tuple[HamiDevice, ...] | None = None
    hami_error = ""
    hami_format = ""
    if REGISTER in annotations:
        hami_format = "json" if str(annotations[REGISTER]).strip().startswith("[") else "list"
        try:
            hami = parse_hami_register(annotations[REGISTER])
        except (ValueError, TypeError, json.JSONDecodeError) as exc:
            hami_error = f"cannot parse {REGISTER}: {exc}"
    return Node(
        name=str(meta.get("name", "")), ready=ready, unschedulable=bool(spec.get("unschedulable")),
        allocatable_gpus=quantity(alloc.get(GPU, 0)), capacity_gpus=quantity(cap.get(GPU, 0)),
        product=_label(labels, "nvidia.com/gpu.product"),
        gpu_memory_mib=quantity(_label(labels, "nvidia.com/gpu.memory") or 0),
        gpu_count_label=quantity(_label(labels, "nvidia.com/gpu.count") or 0), driver=driver,
        mig_strategy=_label(labels, "nvidia.com/mig.strategy"),
        mig_resources=tuple(
            sorted((k, quantity(v)) for k, v in alloc.items() if k.startswith("nvidia.com/mig-"))),
        hami_devices=hami, hami_error=hami_error, hami_format=hami_format)


def parse_workloads(obj: dict[str, Any]) -> tuple[ClusterWorkload, ...]:
    """A List of Deployments/DaemonSets (kubectl get deploy,ds -o json)."""
    out = []
    for item in obj.get("items", []):
        meta = item.get("metadata", {})
        status = item.get("status", {})
        kind = item.get("kind", "")
        if kind == "DaemonSet":
            desired = int(status.get("desiredNumberScheduled", 0))
            ready = int(status.get("numberReady", 0))
        else:
            desired = int((item.get("spec") or {}).get("replicas", 1))
            ready = int(status.get("readyReplicas", 0) or 0)
        labels = meta.get("labels") or {}
        pod = ((item.get("spec") or {}).get("template") or {}).get("spec") or {}
        containers = [c for c in pod.get("containers") or [] if isinstance(c, dict)]
        out.append(
            ClusterWorkload(
                kind=kind, namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
                component=str(labels.get("app.kubernetes.io/component", "")), desired=desired,
                ready=ready, version=hami_version(labels, containers),
                scheduler_name=scheduler_name(containers)))
    return tuple(out)


VERSION = re.compile(r"v?([0-9]+\.[0-9]+\.[0-9]+)")


def hami_version(labels: dict[str, Any], containers: list[dict[str, Any]]) -> str:
    """HAMi's version from its chart's labels (app.kubernetes.io/version, helm.sh/chart
    `hami-X.Y.Z`), else the tag of its own image (projecthami/hami:vX.Y.Z)."""
    for text in (labels.get("app.kubernetes.io/version"), labels.get("helm.sh/chart")):
        m = VERSION.search(str(text or ""))
        if m:
            return m.group(1)
    for c in containers:
        image = str(c.get("image", ""))
        name, _, tag = image.rpartition(":")
        if "hami" in name.rsplit("/", 1)[-1] and "/" not in tag:
            m = VERSION.fullmatch(tag.split("-", 1)[0])
            if m:
                return m.group(1)
    return ""


def scheduler_name(containers: list[dict[str, Any]]) -> str:
    """`--scheduler-name` in hami-scheduler's containers: HAMi's chart always passes
    `.Values.schedulerName` to its extender (vgpu-scheduler-extender), and to kube-scheduler on
    Kubernetes < 1.22 (newer ones read it from a config file)."""
    for c in containers:
        words = [str(w) for w in (c.get("command") or []) + (c.get("args") or [])]
        for i, word in enumerate(words):
            if word.startswith("--scheduler-name="):
                return word.split("=", 1)[1]
            if word == "--scheduler-name" and i + 1 < len(words):
                return words[i + 1]
    return ""


def parse_crds(obj: dict[str, Any]) -> tuple[Crd, ...]:
    out = []
    for item in obj.get("items", []):
        spec = item.get("spec", {})
        out.append(Crd(name=str(item.get("metadata", {}).get("name", "")),
                       group=str(spec.get("group", "")),
                       kind=str((spec.get("names") or {}).get("kind", ""))))
    return tuple(sorted(out, key=lambda c: c.name))


def cluster_facts(raw: dict[str, str]) -> ClusterFacts:
    """ClusterFacts from recorded files: nodes.json, workloads.json, crds.json (+ *.err)."""
    missing = []
    if "cluster.err" in raw:
        return ClusterFacts(error=raw["cluster.err"].strip())
    nodes: tuple[Node, ...] = ()
    workloads = crds = None
    for name in ("nodes.json", "workloads.json", "crds.json"):
        if name not in raw:
            reason = raw.get(name + ".err", "not gathered").strip() or "not gathered"
            missing.append(Missing(name, reason))
            continue
        try:
            data = json.loads(raw[name])
            if name == "nodes.json":
                nodes = tuple(parse_node(n) for n in data.get("items", []))
            elif name == "workloads.json":
                workloads = parse_workloads(data)
            else:
                crds = parse_crds(data)
        except facts.PARSE_ERRORS as exc:  # a damaged recording: say which file, never crash
            missing.append(Missing(name, f"unreadable output ({type(exc).__name__})"))
    return ClusterFacts(nodes=nodes, workloads=workloads, crds=crds, missing=tuple(missing))


# API groups served by Kubernetes itself; any other group in a rendered object needs a CRD.
BUILTIN_GROUPS = frozenset({
    "", "apps", "batch", "policy", "autoscaling", "networking.k8s.io",
    "rbac.authorization.k8s.io", "storage.k8s.io", "scheduling.k8s.io", "coordination.k8s.io",
    "admissionregistration.k8s.io", "apiextensions.k8s.io", "certificates.k8s.io",
    "discovery.k8s.io", "node.k8s.io", "events.k8s.io", "apiregistration.k8s.io"})
HINTS = {
    "inference.networking.k8s.io": "the Gateway API Inference Extension CRDs (InferencePool v1)",
    "gateway.networking.k8s.io": "the Gateway API CRDs (standard channel)",
    "leaderworkerset.x-k8s.io": "LeaderWorkerSet (its release manifests)"}


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
            else:
                w, bad = ws[0], any(w.ready < max(1, w.desired) for w in ws)
                fix = f"kubectl -n {w.namespace} describe {w.kind.lower()} {w.name}" if bad else ""
                out.append(Finding("FAIL" if bad else "PASS", "hami.workloads",
                                   f"{w.namespace}/{w.name}", f"{w.kind} {w.ready}/{w.desired} "
                                   "ready", "all ready", fix))
    out += _allocatable(registered)
    out += _scheduler(c)
    out += _versions(c, registered)
    out += _slices(plan, registered, c.nodes)
    return out


def _allocatable(registered: list[Node]) -> list[Finding]:
    """A node HAMi registers GPUs on must also advertise nvidia.com/gpu (HAMi's own device
    plugin does, counting vGPUs): 0 means the kubelet never got HAMi's resources."""
    return [Finding("FAIL", "hami.allocatable", n.name,
                    f"{len(n.hami_devices or ())} GPUs registered, nvidia.com/gpu allocatable 0",
                    "nvidia.com/gpu > 0 (HAMi's device plugin advertises it)",
                    "check hami-device-plugin on the node; disable any other NVIDIA device plugin "
                    "there (both advertise nvidia.com/gpu)")
            for n in registered
            if n.allocatable_gpus == 0]


def _scheduler(c: ClusterFacts) -> list[Finding]:
    """The bundle's decode pods name schedulerName hami-scheduler: the scheduler must run under
    that name (known when its kube-scheduler takes --scheduler-name; a config file is not read)."""
    out = []
    for w in c.workloads or ():
        if w.component != "hami-scheduler" or not w.scheduler_name:
            continue
        ok = w.scheduler_name == HAMI_SCHEDULER
        fix = "" if ok else (f"install HAMi with schedulerName: {HAMI_SCHEDULER} (chart value); "
                             "pods naming a scheduler nobody runs stay Pending")
        out.append(Finding("PASS" if ok else "FAIL", "hami.scheduler", f"{w.namespace}/{w.name}",
                           f"--scheduler-name={w.scheduler_name}",
                           f"schedulerName {HAMI_SCHEDULER} (the decode pods ask for it)", fix))
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
    if sched and facts.version_tuple(sched) < (2, 8) and json_nodes:
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
    needed = required_kinds(plan) if plan.disaggregated else ()
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
           if n.driver and facts.version_tuple(n.driver) < facts.version_tuple(rel.min_driver)]
    if old:
        return [Finding("WARN", "cluster.driver", "cluster", "old drivers: " + ", ".join(old),
                        f">= {rel.min_driver} (CUDA {rel.cuda_major})",
                        "keep engine pods off those nodes (kubernetes.nodeSelector), upgrade "
                        "their driver, or pin an older engine.version")]
    return []


def cluster(plan: Plan, c: ClusterFacts | None) -> list[Finding]:
    if c is None or c.error:
        return [Finding("FAIL", "cluster.reach", "cluster", c.error if c else "no cluster facts",
                        "a reachable cluster", "check --kubeconfig / --context")]
    out = [Finding("WARN", "cluster.facts", "cluster", f"{m.name}: {m.reason}", "readable")
           for m in c.missing]
    return out + gpus(plan, c) + drivers(plan, c) + hami(plan, c) + crds(plan, c)


def check(c: PlanCheck) -> list[Finding]:
    return cluster(c.plan, c.facts.cluster) if c.plan.on_kubernetes else []
