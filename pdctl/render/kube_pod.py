"""The vLLM engine pod on Kubernetes, shared by every phase: the engine container (probes,
secrets as env, RDMA), the model-cache, shm and LoRA volumes, the pod spec with the role's
settings; and phase 1's Service and Deployment. Builds on kube.py, never the other way.

LoRA adapters (docs/lora.md): a read-only volume per `claim` or `image` adapter at
/adapters/<name>, and for `hf` adapters pinned at a revision an emptyDir at
/root/.cache/pdctl-adapters filled by one init container per adapter (the engine's image, its
huggingface_hub). `hf` adapters without a revision are fetched by vLLM into the model cache."""

from __future__ import annotations

from typing import Any

from pdctl.plan.model import Instance, Plan
from pdctl.render.kube import (
    Obj,
    add_container_extras,
    add_scheduling,
    common_objects,
    container_security,
    deployment_obj,
    http_service,
    port,
    pvc_name,
    resources,
    selector,
    settings,
)
from pdctl.spec.lora import FETCH_CODE, FETCHED_IN_ROOT, MOUNTED, fetched, folder, safe

# RDMA verbs register (pin) memory: with IPC_LOCK a process may lock more than RLIMIT_MEMLOCK,
# which Kubernetes cannot raise (UCX and Mooncake docs; llm-d's wide-EP pods add it too).
RDMA_CAPABILITIES = ("IPC_LOCK",)
FETCHED_VOLUME = "lora-fetched"


def gpu_request(count: int) -> dict[str, str]:
    return {"nvidia.com/gpu": str(count)} if count else {}


def _probe(period: int, failures: int) -> Obj:
    return {
        "httpGet": {"path": "/health", "port": "http"}, "periodSeconds": period,
        "timeoutSeconds": 5, "failureThreshold": failures,
    }


def env_list(plan: Plan, inst: Instance) -> list[Obj]:
    out: list[Obj] = [
        {
            "name": secret.name,
            "valueFrom": {"secretKeyRef": {"name": secret.secret_name, "key": secret.secret_key}},
        }
        for secret in plan.secrets
    ]
    return out + [{"name": k, "value": v} for k, v in inst.env]


def _mounted_adapters(plan: Plan) -> list[tuple[int, Any]]:
    lora = plan.spec.model.lora
    if lora is None:
        return []
    return [(i, a) for i, a in enumerate(lora.adapters) if a.claim or a.image]


def engine_mounts(plan: Plan) -> list[Obj]:
    """The model cache (read-only from an image), shm, then each mounted LoRA adapter."""
    st = plan.spec.kubernetes.storage
    cache: Obj = {"name": "model-cache", "mountPath": st.mount}
    if st.type == "image":
        cache["readOnly"] = True
    out = [cache, {"name": "shm", "mountPath": "/dev/shm"}]
    for i, a in _mounted_adapters(plan):
        mount: Obj = {"name": f"lora-{i}", "mountPath": f"{MOUNTED}/{safe(a.name)}"}
        if a.sub_path:
            mount["subPath"] = a.sub_path
        out.append({**mount, "readOnly": True})
    if fetched(plan.spec.model.lora):
        out.append({"name": FETCHED_VOLUME, "mountPath": FETCHED_IN_ROOT, "readOnly": True})
    return out


def volumes(plan: Plan, tensor_parallel: int) -> list[Obj]:
    """The `model-cache` volume from kubernetes.storage, shm, the LoRA adapters' volumes."""
    k8s = plan.spec.kubernetes
    st = k8s.storage
    source: Obj
    if st.type == "emptyDir":
        source = {"emptyDir": {"sizeLimit": st.size}}
    elif st.type == "hostPath":
        source = {"hostPath": {"path": st.path, "type": "DirectoryOrCreate"}}
    elif st.type == "nfs":
        source = {"nfs": {"server": st.server, "path": st.path}}
    elif st.type == "image":
        source = {"image": {"reference": st.reference}}
        if st.pull_policy:
            source["image"]["pullPolicy"] = st.pull_policy
    else:
        source = {"persistentVolumeClaim": {"claimName": pvc_name(plan)}}
    shm_size = k8s.shm_size or f"{2 + 4 * (tensor_parallel - 1)}Gi"
    out = [
        {"name": "model-cache", **source},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}},
    ]
    for i, a in _mounted_adapters(plan):
        if a.claim:
            source = {"persistentVolumeClaim": {"claimName": a.claim, "readOnly": True}}
        else:
            source = {"image": {"reference": a.image, "pullPolicy": "IfNotPresent"}}
        out.append({"name": f"lora-{i}", **source})
    if fetched(plan.spec.model.lora):
        out.append({"name": FETCHED_VOLUME, "emptyDir": {}})
    return out


def fetch_containers(plan: Plan, env: list[Obj], security: Obj) -> list[Obj]:
    """One init container per adapter pinned at a revision (`env`: the engine's, for
    HF_TOKEN; `security`: the engine container's securityContext)."""
    root = FETCHED_IN_ROOT
    return [
        {
            "name": f"fetch-adapter-{i}", "image": plan.image, "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-c", FETCH_CODE, a.hf, a.revision, f"{root}/{folder(a)}"],
            "env": [e for e in env if e["name"] == "HF_TOKEN"],
            "volumeMounts": [{"name": FETCHED_VOLUME, "mountPath": root}],
            "securityContext": security,
        }
        for i, a in enumerate(fetched(plan.spec.model.lora))
    ]


def engine_container(
    plan: Plan, inst: Instance, gpu: dict[str, str], number: int = 8000, name: str = "vllm"
) -> Obj:
    k8s = plan.spec.kubernetes
    pod = settings(plan, inst.role)
    rdma = pod.rdma
    if rdma is not None:  # the device plugin's resources, beside the GPUs
        gpu = {**gpu, **{k: str(v) for k, v in sorted(rdma.resources.items())}}
    load_failures = max(1, k8s.startup_timeout_minutes * 60 // 10)
    container = {
        "name": name, "image": plan.image, "imagePullPolicy": "IfNotPresent",
        "command": ["vllm", "serve"], "args": list(inst.args), "env": env_list(plan, inst),
        "ports": [port("http", number)], "resources": resources(pod.resources, gpu),
        "volumeMounts": engine_mounts(plan),
        # Model download and load take minutes: the startup probe allows for it, then
        # readiness and liveness take over.
        "startupProbe": _probe(10, load_failures), "readinessProbe": _probe(5, 3),
        "livenessProbe": _probe(10, 6),
        "securityContext": container_security(add=RDMA_CAPABILITIES if rdma else ()),
    }
    return add_container_extras(container, pod)


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


def phase1_objects(plan: Plan) -> list[Obj]:
    """Phase 1 on one node per replica: a Service and a Deployment of the engine pod."""
    (inst,) = plan.instances
    container = engine_container(plan, inst, gpu_request(inst.gpu_count))
    pod = pod_spec(plan, [container], inst.tensor_parallel)
    return [
        *common_objects(plan), http_service(plan, plan.name, "serve", 8000),
        deployment_obj(plan, f"{plan.name}-serve", "serve", inst.replicas, pod),
    ]
