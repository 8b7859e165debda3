"""Parsers for Kubernetes facts: node JSON (`kubectl get nodes -o json`), HAMi's device
registration annotation (JSON since HAMi 2.8, comma/colon before), HAMi workloads and CRDs."""

from __future__ import annotations

import json
import re
from typing import Any

from pdctl.facts.model import ClusterFacts, ClusterWorkload, Crd, HamiDevice, Missing, Node

REGISTER = "hami.io/node-nvidia-register"
GPU = "nvidia.com/gpu"
HAMI_COMPONENTS = ("hami-scheduler", "hami-device-plugin")


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
                id=str(d.get("id", "")),
                index=int(d.get("index", 0)),
                count=int(d.get("count", 0)),
                devmem=int(d.get("devmem", 0)),
                devcore=int(d.get("devcore", 0)),
                type=str(d.get("type", "")),
                numa=int(d.get("numa", 0)),
                mode=str(d.get("mode", "")),
                health=_truthy(d.get("health", False)),
            )
            for d in items
        )
    devices = []
    for i, item in enumerate(p for p in text.split(":") if p.strip()):
        f = [x.strip() for x in item.split(",")]
        if len(f) < 7:
            raise ValueError(f"device {i} has {len(f)} fields, expected at least 7: {item!r}")
        devices.append(
            HamiDevice(
                id=f[0],
                count=int(f[1]),
                devmem=int(f[2]),
                devcore=int(f[3]),
                type=f[4],
                numa=int(f[5]),
                health=_truthy(f[6]),
                index=int(f[7]) if len(f) > 7 and f[7].isdigit() else i,
                mode=f[8] if len(f) > 8 else "",
            )
        )
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
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    driver = _label(labels, "nvidia.com/cuda.driver-version.full")
    if not driver:
        parts = [
            _label(labels, f"nvidia.com/cuda.driver-version.{p}", f"nvidia.com/cuda.driver.{q}")
            for p, q in (("major", "major"), ("minor", "minor"), ("revision", "rev"))
        ]
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
        name=str(meta.get("name", "")),
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        allocatable_gpus=quantity(alloc.get(GPU, 0)),
        capacity_gpus=quantity(cap.get(GPU, 0)),
        product=_label(labels, "nvidia.com/gpu.product"),
        gpu_memory_mib=quantity(_label(labels, "nvidia.com/gpu.memory") or 0),
        gpu_count_label=quantity(_label(labels, "nvidia.com/gpu.count") or 0),
        driver=driver,
        mig_strategy=_label(labels, "nvidia.com/mig.strategy"),
        mig_resources=tuple(
            sorted((k, quantity(v)) for k, v in alloc.items() if k.startswith("nvidia.com/mig-"))
        ),
        hami_devices=hami,
        hami_error=hami_error,
        hami_format=hami_format,
    )


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
                kind=kind,
                namespace=str(meta.get("namespace", "")),
                name=str(meta.get("name", "")),
                component=str(labels.get("app.kubernetes.io/component", "")),
                desired=desired,
                ready=ready,
                version=hami_version(labels, containers),
                scheduler_name=scheduler_name(containers),
            )
        )
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
        out.append(
            Crd(
                name=str(item.get("metadata", {}).get("name", "")),
                group=str(spec.get("group", "")),
                kind=str((spec.get("names") or {}).get("kind", "")),
            )
        )
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
        except (
            ValueError,
            TypeError,
            KeyError,
            AttributeError,
            IndexError,
            RecursionError,
            OverflowError,
        ) as exc:  # a damaged recording: say which file, never crash
            missing.append(Missing(name, f"unreadable output ({type(exc).__name__})"))
    return ClusterFacts(nodes=nodes, workloads=workloads, crds=crds, missing=tuple(missing))
