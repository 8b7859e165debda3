"""A role's pod settings (plan.pods: the `kubernetes` section merged with the role's own) as
pod-spec and container fields: scheduling, resources, extra env and volumes, the model
source volume, labels and annotations."""

from __future__ import annotations

from typing import Any

from pdctl.plan.model import Plan
from pdctl.spec.base import Section
from pdctl.spec.kube import PodSettings, Resources
from pdctl.spec.rdma import MULTUS_ANNOTATION

Obj = dict[str, Any]
ROLES = ("serve", "prefill", "decode", "epp")


def settings(plan: Plan, role: str) -> PodSettings:
    """The effective settings of a pod role; other components take the section's."""
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


def object_labels(plan: Plan, component: str) -> tuple[dict[str, str], dict[str, str]]:
    """Labels (pdctl's, then the user's) and annotations of an object of `component`."""
    pod = settings(plan, component) if component in ROLES else plan.spec.kubernetes
    labels = {**plan.labels(component), **dict(sorted(pod.labels.items()))}
    return labels, dict(sorted(pod.annotations.items()))


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


def model_volume(plan: Plan, claim: str) -> Obj:
    """The `model-cache` volume from kubernetes.storage."""
    st = plan.spec.kubernetes.storage
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
        source = {"persistentVolumeClaim": {"claimName": claim}}
    return {"name": "model-cache", **source}


def model_mount(plan: Plan) -> Obj:
    st = plan.spec.kubernetes.storage
    mount: Obj = {"name": "model-cache", "mountPath": st.mount}
    if st.type == "image":
        mount["readOnly"] = True
    return mount
