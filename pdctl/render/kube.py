"""Kubernetes objects built as data (dicts), dumped once when read: the helpers every
Kubernetes render file uses (metadata and labels, a role's pod settings as pod-spec fields,
Services, Deployments, the namespace and model-cache claim). The engine pod is kube_pod.py's;
the workloads are kube_pod.phase1_objects, lws.py and pd_kube.py. Imports no render file but
bundle.py."""

from __future__ import annotations

from functools import partial
from typing import Any

import yaml

from pdctl import __version__
from pdctl.plan.model import Plan
from pdctl.render.bundle import Artifact
from pdctl.spec.base import Section
from pdctl.spec.kube import PodSettings, Resources
from pdctl.spec.rdma import MULTUS_ANNOTATION

Obj = dict[str, Any]
ROLES = ("serve", "prefill", "decode", "epp")


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


def _document(head: str, obj: Obj) -> str:
    return "---\n" + head + dump(obj)


def artifacts(plan: Plan, objs: list[Obj]) -> list[Artifact]:
    """One file per object; its YAML is dumped when first read (render streams it, `up`
    applies the objects as data)."""
    head = (
        f"# Rendered by pdctl {__version__} from spec {plan.name!r} (phase {plan.phase}).\n"
        "# Do not edit: change the spec and render again.\n"
    )
    out = []
    for i, obj in enumerate(objs):
        name = f"{i:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        out.append(Artifact(name, make=partial(_document, head, obj)))
    return out


def settings(plan: Plan, role: str) -> PodSettings:
    """The effective settings of a pod role (plan.pods: the `kubernetes` section merged with
    the role's own); other components take the section's."""
    return dict(plan.pods).get(role, plan.spec.kubernetes)


def data(model: Section) -> Any:
    """A spec model as API data: camelCase keys, no unset value or empty list. An empty map
    stays: `labelSelector: {}` (every pod) is not a selector left out (none). Read field by
    field: model_dump would build the model's validator, scanning pydantic's plugins."""
    out: dict[str, Any] = {}
    for name, field in type(model).model_fields.items():
        value = _plain(getattr(model, name))
        if value is not None and value != []:
            out[field.alias or name] = value
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, Section):
        return data(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def metadata(plan: Plan, name: str, component: str, namespaced: bool = True) -> Obj:
    """An object's metadata: pdctl's labels, then the user's; the user's annotations."""
    meta: Obj = {"name": name}
    if namespaced:
        meta["namespace"] = plan.spec.kubernetes.namespace
    pod = settings(plan, component) if component in ROLES else plan.spec.kubernetes
    meta["labels"] = {**plan.labels(component), **dict(sorted(pod.labels.items()))}
    if pod.annotations:
        meta["annotations"] = dict(sorted(pod.annotations.items()))
    return meta


def selector(plan: Plan, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/instance": plan.spec.name, "app.kubernetes.io/component": component}


def pod_metadata(
    plan: Plan, component: str, labels: dict[str, str], annotations: dict[str, str]
) -> Obj:
    """A pod template's metadata: pdctl's labels, `labels` (pool, role), the user's object and
    pod labels; the user's annotations, then pdctl's (`annotations`: HAMi)."""
    pod = settings(plan, component)
    meta: Obj = {
        "labels": {
            **plan.labels(component),
            **labels,
            **dict(sorted({**pod.labels, **pod.pod_labels}.items())),
        }
    }
    notes = {**pod.annotations, **pod.pod_annotations, **annotations}
    if pod.rdma is not None and pod.rdma.networks:  # Multus attaches the RDMA networks
        notes[MULTUS_ANNOTATION] = ",".join(pod.rdma.networks)
    if notes:
        meta["annotations"] = dict(sorted(notes.items()))
    return meta


def pvc_name(plan: Plan) -> str:
    st = plan.spec.kubernetes.storage
    if st.type == "existingClaim":
        assert st.claim_name
        return st.claim_name
    return f"{plan.name}-model-cache"


def common_objects(plan: Plan) -> list[Obj]:
    """The Namespace (kubernetes.createNamespace) and the model cache's claim (storage pvc)."""
    k8s = plan.spec.kubernetes
    objs: list[Obj] = []
    if k8s.create_namespace:
        meta = metadata(plan, k8s.namespace, "namespace", namespaced=False)
        objs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    st = k8s.storage
    if st.type == "pvc":
        spec: Obj = {
            "accessModes": [st.access_mode], "resources": {"requests": {"storage": st.size}},
            "volumeMode": "Filesystem",
        }
        if st.storage_class:
            spec["storageClassName"] = st.storage_class
        meta = metadata(plan, pvc_name(plan), "model-cache")
        objs.append(
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}
        )
    return objs


def port(name: str, number: int) -> Obj:
    """A container port."""
    return {"name": name, "containerPort": number, "protocol": "TCP"}


def service_obj(
    plan: Plan, name: str, component: str, ports: list[Obj], kind: str | None = None
) -> Obj:
    """A Service of the component's pods; `kind`: its type (kubernetes.serviceType)."""
    return {
        "apiVersion": "v1", "kind": "Service", "metadata": metadata(plan, name, component),
        "spec": {
            "type": kind or plan.spec.kubernetes.service_type,
            "selector": selector(plan, component), "ports": ports,
        },
    }


def http_service(plan: Plan, name: str, component: str, number: int) -> Obj:
    ports = [{"name": "http", "port": number, "targetPort": "http", "protocol": "TCP"}]
    return service_obj(plan, name, component, ports)


def deployment_obj(
    plan: Plan, name: str, component: str, replicas: int, pod: Obj, pod_labels: dict | None = None,
    annotations: dict | None = None,
) -> Obj:
    template = pod_metadata(plan, component, pod_labels or {}, annotations or {})
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata(plan, name, component),
        "spec": {
            "replicas": replicas, "selector": {"matchLabels": selector(plan, component)},
            # GPUs are scarce: replace pods one at a time instead of surging extra ones.
            "strategy": {
                "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "template": {"metadata": template, "spec": pod},
        },
    }


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
        "allowPrivilegeEscalation": False, "capabilities": caps,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if non_root:
        ctx["runAsNonRoot"] = True
    return ctx


def resources(res: Resources, gpu: dict[str, str]) -> Obj:
    requests = {"cpu": res.cpu, "memory": res.memory}
    if res.ephemeral_storage:
        requests["ephemeral-storage"] = res.ephemeral_storage
    limits = dict(requests)
    if res.limits is not None:
        for key, value in data(res.limits).items():
            limits["ephemeral-storage" if key == "ephemeralStorage" else key] = value
    return {"limits": {**limits, **gpu}, "requests": {**requests, **gpu}}


def add_container_extras(container: Obj, pod: PodSettings) -> Obj:
    """Extra env (valueFrom), envFrom and mounts of the role, after pdctl's own."""
    if pod.env:
        container.setdefault("env", []).extend(data(e) for e in pod.env)
    if pod.env_from:
        container["envFrom"] = [data(e) for e in pod.env_from]
    if pod.volume_mounts:
        container.setdefault("volumeMounts", []).extend(data(m) for m in pod.volume_mounts)
    return container


def add_scheduling(spec: Obj, pod: PodSettings, own: dict[str, str]) -> Obj:
    """Scheduling fields of the role into a pod spec (before its volumes); `own` is the
    selector of the role's pods, the default of a spread constraint's labelSelector."""
    volumes = spec.pop("volumes", None)
    if pod.service_account_name and "serviceAccountName" not in spec:
        spec["serviceAccountName"] = pod.service_account_name
    if pod.node_selector:
        spec["nodeSelector"] = dict(sorted(pod.node_selector.items()))
    if pod.tolerations:
        spec["tolerations"] = [data(t) for t in pod.tolerations]
    if pod.affinity is not None and data(pod.affinity):
        spec["affinity"] = data(pod.affinity)
    if pod.topology_spread_constraints:
        spread = []
        for item in pod.topology_spread_constraints:
            one = data(item)
            one.setdefault("labelSelector", {"matchLabels": dict(own)})
            spread.append(one)
        spec["topologySpreadConstraints"] = spread
    if pod.priority_class_name:
        spec["priorityClassName"] = pod.priority_class_name
    if pod.runtime_class_name:
        spec["runtimeClassName"] = pod.runtime_class_name
    if pod.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in pod.image_pull_secrets]
    # Volume sources pass as written (`emptyDir: {}` is a whole source).
    spec["volumes"] = [*(volumes or []), *(data(v) for v in pod.volumes)]
    if not spec["volumes"]:
        del spec["volumes"]
    return spec
