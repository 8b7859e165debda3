"""Kubernetes phases 2 and 3, llm-d style: prefill and decode Deployments (decode behind the
routing sidecar), an InferencePool, the endpoint picker (EPP) and, in phase 3, HAMi slices; a
role across nodes is a LeaderWorkerSet of its pod (lws.py). Its RBAC is kube_security.py's."""

from __future__ import annotations

from typing import Any

from pdctl.compat import LLMD
from pdctl.plan.llmd import K8S_DECODE_PORT, K8S_PREFILL_PORT
from pdctl.plan.model import Instance, Plan
from pdctl.render.kube import (
    Obj,
    add_container_extras,
    add_scheduling,
    common_objects,
    container_security,
    deployment_obj,
    dump,
    metadata,
    port,
    resources,
    selector,
    service_obj,
    settings,
)
from pdctl.render.kube_pod import engine_container, gpu_request, pod_spec
from pdctl.render.kube_security import (
    epp_rbac,
    sidecar_account,
    sidecar_rbac,
    token_mount,
    token_volume,
)
from pdctl.render.lws import WORKER_LABEL, group_lws
from pdctl.render.netpol import network_policies

POOL_LABEL = "pdctl.io/pool"
ROLE_LABEL = "llm-d.ai/role"
HAMI_SCHEDULER = "hami-scheduler"
EPP_CONFIG = "epp-config.yaml"


# The EPP's metrics extractor maps a pod's metric names by this label (llm-d-router renamed it
# from the deprecated `inference.networking.k8s.io/engine-type`: llm-d/llm-d-router#922).
ENGINE_TYPE_LABEL = "llm-d.ai/engine-type"


def pool_labels(plan: Plan) -> dict[str, str]:
    return {POOL_LABEL: plan.name, ENGINE_TYPE_LABEL: "vllm"}


def _pod_ip_env() -> Obj:
    return {
        "name": "VLLM_NIXL_SIDE_CHANNEL_HOST",
        "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
    }


def _vllm_container(plan: Plan, inst: Instance, gpu: dict[str, str], number: int) -> Obj:
    container = engine_container(plan, inst, gpu, number)
    container["env"].append(_pod_ip_env())
    container["ports"] += [port(name, extra) for name, extra in inst.extra_ports]
    return container


def sidecar_container(plan: Plan) -> Obj:
    """llm-d's routing proxy as a native sidecar (an initContainer that keeps running). It
    forwards a prompt to the prefill pod named by the request's x-prefiller-host-port header,
    so it sends only to the pods of its own InferencePool (SSRF protection)."""
    return {
        "name": "routing-proxy", "image": LLMD.sidecar_image, "imagePullPolicy": "IfNotPresent",
        "args": [
            f"--port={K8S_PREFILL_PORT}",
            # --vllm-port is only a deprecated alias of this flag at the pinned llm-d-router.
            f"--model-server-port={K8S_DECODE_PORT}", f"--kv-connector={LLMD.sidecar_connector}",
            "--secure-proxy=false", "--enable-ssrf-protection=true",
            f"--inference-pool={plan.spec.kubernetes.namespace}/{plan.name}",
            f"--pool-group={LLMD.pool_group}",
        ],
        "ports": [port("sidecar", K8S_PREFILL_PORT)], "restartPolicy": "Always",
        "resources": {
            "requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"},
        },
        "securityContext": container_security(non_root=True), "volumeMounts": [token_mount()],
    }


def prefill_deployment(plan: Plan, inst: Instance) -> Obj:
    gpu = gpu_request(inst.gpu_count)
    extra: dict[str, Any] = {}
    if plan.phase == 3 and gpu:
        # Whole GPUs under HAMi: all of each GPU's memory, so no decode slice lands beside it.
        gpu["nvidia.com/gpumem-percentage"] = "100"
        extra["schedulerName"] = HAMI_SCHEDULER
    container = _vllm_container(plan, inst, gpu, K8S_PREFILL_PORT)
    pod = pod_spec(plan, [container], inst.tensor_parallel, "prefill", **extra)
    labels = {**pool_labels(plan), ROLE_LABEL: "prefill"}
    return deployment_obj(plan, inst.name, "prefill", inst.replicas, pod, labels)


def decode_deployment(plan: Plan, inst: Instance) -> Obj:
    gpu = gpu_request(inst.gpu_count)
    extra: dict[str, Any] = {}
    annotations: dict[str, str] = {}
    sl = plan.slice
    if sl is not None:
        assert plan.spec.decode is not None and plan.spec.decode.share is not None
        share = plan.spec.decode.share
        gpu = {"nvidia.com/gpu": str(max(1, inst.tensor_parallel))}
        if sl.memory_mib is not None:
            gpu["nvidia.com/gpumem"] = str(sl.memory_mib)
        else:
            gpu["nvidia.com/gpumem-percentage"] = str(sl.memory_percent)
        if sl.cores_percent is not None:
            gpu["nvidia.com/gpucores"] = str(sl.cores_percent)
        extra["schedulerName"] = HAMI_SCHEDULER
        if share.gpu_type:
            annotations["nvidia.com/use-gputype"] = share.gpu_type
        if share.policy:
            annotations["hami.io/gpu-scheduler-policy"] = share.policy
    extra["serviceAccountName"] = sidecar_account(plan)
    extra["initContainers"] = [sidecar_container(plan)]
    container = _vllm_container(plan, inst, gpu, K8S_DECODE_PORT)
    pod = pod_spec(plan, [container], inst.tensor_parallel, "decode", **extra)
    pod["volumes"].append(token_volume())
    labels = {**pool_labels(plan), ROLE_LABEL: "decode"}
    return deployment_obj(plan, inst.name, "decode", inst.replicas, pod, labels, annotations)


def inference_pool(plan: Plan) -> Obj:
    return {
        "apiVersion": LLMD.pool_api, "kind": "InferencePool",
        "metadata": metadata(plan, plan.name, "inference-pool"),
        "spec": {
            "selector": {"matchLabels": {POOL_LABEL: plan.name}},
            "targetPorts": [{"number": K8S_PREFILL_PORT}],
            "endpointPickerRef": {
                "kind": "Service", "name": f"{plan.name}-epp",
                "port": {"number": LLMD.epp_grpc_port}, "failureMode": "FailOpen",
            },
        },
    }


def epp_config(lora: bool = False) -> Obj:
    """Prefix-cache, queue and KV-cache-utilization scoring; P/D split by a prefix decider.
    With LoRA adapters also `lora-affinity-scorer`: it prefers pods whose vLLM already runs the
    request's adapter (vllm:lora_requests_info, the Inference Extension's model server
    protocol), so an adapter is not swapped into a GPU slot where one is already loaded."""
    scorers = [
        {"pluginRef": "prefix-cache-scorer", "weight": 2},
        {"pluginRef": "queue-scorer", "weight": 1},
        {"pluginRef": "kv-cache-utilization-scorer", "weight": 1},
        *([{"pluginRef": "lora-affinity-scorer", "weight": 1}] if lora else []),
        {"pluginRef": "max-score-picker"},
    ]
    return {
        "apiVersion": LLMD.epp_config_api, "kind": "EndpointPickerConfig",
        "plugins": [
            {"type": "prefix-cache-scorer"}, {"type": "queue-scorer"},
            {"type": "kv-cache-utilization-scorer"},
            *([{"type": "lora-affinity-scorer"}] if lora else []), {"type": "prefill-filter"},
            {"type": "decode-filter"}, {"type": "max-score-picker"},
            {"type": "prefix-based-pd-decider", "parameters": {"nonCachedTokens": 16}},
            {
                "type": "disagg-profile-handler",
                "parameters": {"deciders": {"prefill": "prefix-based-pd-decider"}},
            },
        ],
        "schedulingProfiles": [
            {"name": "prefill", "plugins": [{"pluginRef": "prefill-filter"}, *scorers]},
            {"name": "decode", "plugins": [{"pluginRef": "decode-filter"}, *scorers]},
        ],
    }


def epp_objects(plan: Plan) -> list[Obj]:
    name = f"{plan.name}-epp"
    ns = plan.spec.kubernetes.namespace
    epp = settings(plan, "epp")
    config = {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(plan, name, "epp"),
        "data": {EPP_CONFIG: dump(epp_config(plan.spec.model.lora is not None))},
    }
    # gRPC is HTTP/2 over plain TCP to the Service: Kubernetes' standard appProtocol for it is
    # `kubernetes.io/h2c` (what llm-d-router's chart sets on 9002); a bare `http2` is not one
    # Gateway implementations have to understand.
    ports = [
        ("grpc-ext-proc", LLMD.epp_grpc_port, "kubernetes.io/h2c"),
        ("grpc-health", LLMD.epp_health_port, "kubernetes.io/h2c"),
        ("http-metrics", LLMD.epp_metrics_port, "http"),
    ]
    container = {
        "name": "epp", "image": LLMD.epp_image, "imagePullPolicy": "IfNotPresent",
        "args": [
            f"--pool-name={plan.name}", f"--pool-namespace={ns}", f"--pool-group={LLMD.pool_group}",
            f"--config-file=/config/{EPP_CONFIG}", f"--grpc-port={LLMD.epp_grpc_port}",
            f"--grpc-health-port={LLMD.epp_health_port}", f"--metrics-port={LLMD.epp_metrics_port}",
            # Scrapers need a token allowed to get /metrics (the metrics-reader ClusterRole).
            "--metrics-endpoint-auth=true",
        ],
        "ports": [port(n, p) for n, p, _ in ports], "resources": resources(epp.resources, {}),
        "readinessProbe": {
            "grpc": {"port": LLMD.epp_health_port, "service": "readiness"}, "periodSeconds": 2,
        },
        "livenessProbe": {
            "grpc": {"port": LLMD.epp_health_port, "service": "liveness"}, "initialDelaySeconds": 5,
            "periodSeconds": 10,
        },
        "volumeMounts": [{"name": "config", "mountPath": "/config", "readOnly": True}],
        "securityContext": container_security(non_root=True),
    }
    pod: Obj = {
        "serviceAccountName": name,
        # The picker watches the pool and its pods, and reviews metrics tokens.
        "automountServiceAccountToken": True, "containers": [container],
        "terminationGracePeriodSeconds": 30,
        "volumes": [{"name": "config", "configMap": {"name": name}}],
    }
    add_container_extras(container, epp)
    add_scheduling(pod, epp, selector(plan, "epp"))
    # One replica: the picker's in-flight load accounting is per process.
    deployment = deployment_obj(plan, name, "epp", 1, pod)
    deployment["spec"]["strategy"] = {"type": "Recreate"}
    service_ports = [
        {"name": n, "port": p, "targetPort": n, "protocol": "TCP", "appProtocol": a}
        for n, p, a in ports
    ]
    service = service_obj(plan, name, "epp", service_ports, "ClusterIP")
    return [*epp_rbac(plan, name), config, deployment, service]


def http_route(plan: Plan, gateway: str) -> Obj:
    rule: Obj = {
        "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
        "backendRefs": [
            {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": plan.name}
        ],
    }
    timeout = plan.spec.router.request_timeout
    if timeout is not None:
        # Long generations outlive Envoy-based Gateways' default route timeout (llm-d's chart
        # sets 300s too).
        rule["timeouts"] = {"request": timeout}
    return {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": metadata(plan, plan.name, "route"),
        "spec": {
            "parentRefs": [
                {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway}
            ],
            "rules": [rule],
        },
    }


def pd_objects(plan: Plan) -> list[Obj]:
    prefill = next(i for i in plan.instances if i.role == "prefill")
    decode = next(i for i in plan.instances if i.role == "decode")
    objs = common_objects(plan)
    objs += epp_objects(plan)
    objs += sidecar_rbac(plan)
    objs.append(inference_pool(plan))
    if plan.spec.router.gateway:  # plan.kinds then holds HTTPRoute
        objs.append(http_route(plan, plan.spec.router.gateway))
    for inst, dep in ((prefill, prefill_deployment), (decode, decode_deployment)):
        workload = dep(plan, inst)
        if inst.workers:  # a role across nodes: a LeaderWorkerSet
            workload = group_lws(plan, inst, workload["spec"]["template"], inst.role)
        objs.append(workload)
    if plan.spec.kubernetes.network_policy:
        groups = prefill.workers or decode.workers
        workers = {WORKER_LABEL: plan.name} if groups else {}
        objs += network_policies(plan, {POOL_LABEL: plan.name}, workers)
    return objs
