"""Kubernetes objects built as data (dicts) and dumped once; phase 1 lives here, and the
pieces (pod template, probes, volumes) are shared with phases 2 and 3."""

from __future__ import annotations

from functools import partial
from typing import Any

import yaml

from pdctl import __version__
from pdctl.plan.model import Instance, Plan
from pdctl.render.bundle import Artifact
from pdctl.render.kube_lora import fetch_containers, lora_mounts, lora_volumes
from pdctl.render.kube_pod import (
    add_container_extras,
    add_scheduling,
    model_mount,
    model_volume,
    object_labels,
    pod_metadata,
    resources,
    settings,
)
from pdctl.spec.kube import CACHE_MOUNT  # noqa: F401  (importers of render.kube)

Obj = dict[str, Any]
GIB = 1024**3
# RDMA verbs register (pin) memory: with IPC_LOCK a process may lock more than RLIMIT_MEMLOCK,
# which Kubernetes cannot raise (UCX and Mooncake docs; llm-d's wide-EP pods add it too).
RDMA_CAPABILITIES = ("IPC_LOCK",)


class _Dumper(yaml.SafeDumper):
    """Block style, no aliases, multi-line strings as literals."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str_presenter)


def dump(obj: Obj) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def doc_header(plan: Plan) -> str:
    return (
        f"# Rendered by pdctl {__version__} from spec {plan.name!r} (phase {plan.phase}).\n"
        "# Do not edit: change the spec and render again.\n"
    )


def metadata(plan: Plan, name: str, component: str, namespaced: bool = True) -> Obj:
    meta: Obj = {"name": name}
    if namespaced:
        meta["namespace"] = plan.spec.kubernetes.namespace
    meta["labels"], annotations = object_labels(plan, component)
    if annotations:
        meta["annotations"] = annotations
    return meta


def selector(plan: Plan, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/instance": plan.spec.name,
        "app.kubernetes.io/component": component,
    }


def shm_size(plan: Plan, tensor_parallel: int) -> str:
    if plan.spec.kubernetes.shm_size:
        return plan.spec.kubernetes.shm_size
    return f"{2 + 4 * (tensor_parallel - 1)}Gi"


def namespace_obj(plan: Plan) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata(plan, plan.spec.kubernetes.namespace, "namespace", namespaced=False),
    }


def pvc_name(plan: Plan) -> str:
    st = plan.spec.kubernetes.storage
    if st.type == "existingClaim":
        assert st.claim_name
        return st.claim_name
    return f"{plan.name}-model-cache"


def pvc_obj(plan: Plan) -> Obj:
    st = plan.spec.kubernetes.storage
    spec: Obj = {
        "accessModes": [st.access_mode],
        "resources": {"requests": {"storage": st.size}},
        "volumeMode": "Filesystem",
    }
    if st.storage_class:
        spec["storageClassName"] = st.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(plan, pvc_name(plan), "model-cache"),
        "spec": spec,
    }


def service_obj(plan: Plan, name: str, component: str, port: int, target: str = "http") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(plan, name, component),
        "spec": {
            "type": plan.spec.kubernetes.service_type,
            "selector": selector(plan, component),
            "ports": [{"name": "http", "port": port, "targetPort": target, "protocol": "TCP"}],
        },
    }


def probe(path: str, port: str, period: int, failures: int, timeout: int = 5) -> Obj:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


def env_list(plan: Plan, inst: Instance) -> list[Obj]:
    out: list[Obj] = []
    for secret in plan.secrets:
        out.append(
            {
                "name": secret.name,
                "valueFrom": {
                    "secretKeyRef": {"name": secret.secret_name, "key": secret.secret_key}
                },
            }
        )
    out += [{"name": k, "value": v} for k, v in inst.env]
    return out


def container_security(non_root: bool = False, add: tuple[str, ...] = ()) -> Obj:
    """No privilege escalation, no capability (vLLM needs none: CUDA, NCCL, CUDA IPC and NIXL
    over UCX's cuda_ipc/cuda_copy/tcp run without any), the runtime's seccomp filter.
    `add`: IPC_LOCK for pods with RDMA (verbs pin memory beyond RLIMIT_MEMLOCK).
    `non_root` for llm-d-router's images, which run as user 65532 (Dockerfile.epp and
    Dockerfile.sidecar at v0.10.0); vLLM's image runs as root."""
    caps: Obj = {"drop": ["ALL"]}
    if add:
        caps["add"] = list(add)
    ctx: Obj = {
        "allowPrivilegeEscalation": False,
        "capabilities": caps,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if non_root:
        ctx["runAsNonRoot"] = True
    return ctx


def engine_container(
    plan: Plan, inst: Instance, gpu: dict[str, str], port: int = 8000, name: str = "vllm"
) -> Obj:
    k8s = plan.spec.kubernetes
    pod = settings(plan, inst.role)
    rdma = pod.rdma
    if rdma is not None:  # the device plugin's resources, beside the GPUs
        gpu = {**gpu, **{k: str(v) for k, v in sorted(rdma.resources.items())}}
    load_failures = max(1, k8s.startup_timeout_minutes * 60 // 10)
    container = {
        "name": name,
        "image": plan.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["vllm", "serve"],
        "args": list(inst.args),
        "env": env_list(plan, inst),
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "resources": resources(pod.resources, gpu),
        "volumeMounts": [
            model_mount(plan),
            {"name": "shm", "mountPath": "/dev/shm"},
            *lora_mounts(plan),
        ],
        # Model download and load take minutes: the startup probe allows for it, then
        # readiness and liveness take over.
        "startupProbe": probe("/health", "http", 10, load_failures),
        "readinessProbe": probe("/health", "http", 5, 3),
        "livenessProbe": probe("/health", "http", 10, 6),
        "securityContext": container_security(add=RDMA_CAPABILITIES if rdma else ()),
    }
    return add_container_extras(container, pod)


def volumes(plan: Plan, tensor_parallel: int) -> list[Obj]:
    cache = model_volume(plan, pvc_name(plan))
    shm = {
        "name": "shm",
        "emptyDir": {"medium": "Memory", "sizeLimit": shm_size(plan, tensor_parallel)},
    }
    return [cache, shm, *lora_volumes(plan)]


def pod_spec(
    plan: Plan, containers: list[Obj], tensor_parallel: int, role: str = "serve", **extra: Any
) -> Obj:
    """A pod spec with the role's settings (plan.pods) and the model-cache and shm volumes."""
    spec: Obj = {}
    spec.update(extra)
    # Engines call no Kubernetes API: no token in reach of the model's code.
    spec.setdefault("automountServiceAccountToken", False)
    spec["containers"] = containers
    fetch = fetch_containers(plan, containers[0]["env"], containers[0]["securityContext"])
    if fetch:  # before any other init container (the decode sidecar): the engine needs them
        spec["initContainers"] = fetch + list(spec.get("initContainers", []))
    spec["terminationGracePeriodSeconds"] = 60
    spec["volumes"] = volumes(plan, tensor_parallel)
    return add_scheduling(spec, settings(plan, role), selector(plan, role))


def deployment_obj(
    plan: Plan,
    name: str,
    component: str,
    replicas: int,
    pod: Obj,
    pod_labels: dict | None = None,
    annotations: dict | None = None,
) -> Obj:
    template = pod_metadata(plan, component, pod_labels or {}, annotations or {})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(plan, name, component),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector(plan, component)},
            # GPUs are scarce: replace pods one at a time instead of surging extra ones.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "template": {"metadata": template, "spec": pod},
        },
    }


def gpu_request(count: int) -> dict[str, str]:
    return {"nvidia.com/gpu": str(count)} if count else {}


def common_objects(plan: Plan) -> list[Obj]:
    objs: list[Obj] = []
    if plan.spec.kubernetes.create_namespace:
        objs.append(namespace_obj(plan))
    if plan.spec.kubernetes.storage.type == "pvc":
        objs.append(pvc_obj(plan))
    return objs


def phase1_objects(plan: Plan) -> list[Obj]:
    (inst,) = plan.instances
    objs = common_objects(plan)
    objs.append(service_obj(plan, plan.name, "serve", 8000))
    container = engine_container(plan, inst, gpu_request(inst.gpu_count))
    pod = pod_spec(plan, [container], inst.tensor_parallel)
    objs.append(deployment_obj(plan, f"{plan.name}-serve", "serve", inst.replicas, pod))
    return objs


def _document(head: str, obj: Obj) -> str:
    return "---\n" + head + dump(obj)


def artifacts(plan: Plan, objs: list[Obj]) -> list[Artifact]:
    """One file per object; its YAML is dumped when first read (render streams it, `up`
    applies the objects as data)."""
    head = doc_header(plan)
    out = []
    for i, obj in enumerate(objs):
        name = f"{i:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        out.append(Artifact(name, make=partial(_document, head, obj)))
    return out
