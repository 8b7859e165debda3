"""Kubernetes pod settings per role (section + role override, merged once) and the shapes
that cannot schedule, refused before anything is rendered: more than one pod on a
ReadWriteOnce model cache without a node pin, a pod asking for more GPUs than the largest
node has (when a cluster recording is given), settings a role cannot take."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdctl.errors import SpecError
from pdctl.plan.model import Instance, Plan
from pdctl.spec.kube import PodSettings, role_settings
from pdctl.spec.model import Serve, Spec
from pdctl.spec.pd import Role
from pdctl.spec.rdma import MULTUS_ANNOTATION

if TYPE_CHECKING:
    from pdctl.preflight.facts import ClusterFacts

HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
CLAIMS = ("pvc", "existingClaim")


def pod_settings(spec: Spec, phase: int) -> tuple[tuple[str, PodSettings], ...]:
    """(role, effective settings) of every pod role: `serve` (phase 1), else `prefill`,
    `decode` and `epp`."""
    k8s = spec.kubernetes

    def of(role: str, section: Serve | Role | None) -> tuple[str, PodSettings]:
        return role, role_settings(k8s, role, section.kubernetes if section else None)

    if phase == 1:
        return (of("serve", spec.serve),)
    epp = ("epp", role_settings(k8s, "epp", spec.router.kubernetes))
    return (of("prefill", spec.prefill), of("decode", spec.decode), epp)


def _path(role: str) -> str:
    return "router" if role == "epp" else role


def pinned_node(pod: PodSettings) -> str | None:
    """The one node a pod must run on (nodeSelector or required node affinity on
    kubernetes.io/hostname with one value), else None."""
    if pod.node_selector.get(HOSTNAME):
        return pod.node_selector[HOSTNAME]
    node = pod.affinity.node_affinity if pod.affinity else None
    required = node.required_during_scheduling_ignored_during_execution if node else None
    if required is None or len(required.node_selector_terms) != 1:
        return None
    for expr in required.node_selector_terms[0].match_expressions:
        if expr.key == HOSTNAME and expr.operator == "In" and len(expr.values) == 1:
            return expr.values[0]
    return None


def _pods(spec: Spec, inst: Instance) -> int:
    shape = spec.serve if inst.role == "serve" else getattr(spec, inst.role, None)
    return inst.replicas * max(1, getattr(shape, "nodes", 1))


def check_claim(plan: Plan) -> None:
    """A ReadWriteOnce claim mounts on one node: more than one pod needs all of them pinned
    to one node."""
    st = plan.spec.kubernetes.storage
    if st.type not in CLAIMS or st.access_mode != "ReadWriteOnce":
        return
    counts = [(i.role, _pods(plan.spec, i)) for i in plan.instances]
    total = sum(n for _, n in counts)
    if total <= 1:
        return
    pins = {pinned_node(plan.pod(role)) for role, _ in counts}
    if len(pins) == 1 and None not in pins:
        return
    who = " + ".join(f"{n} {role}" for role, n in counts)
    claim = "the PVC" if st.type == "pvc" else f"claim {st.claim_name}"
    default = "" if "access_mode" in st.model_fields_set else " (the default)"
    raise SpecError(
        f"{total} pods ({who}) mount {claim} ReadWriteOnce{default}, which attaches to one node, "
        "and no node pin holds them on one",
        path="kubernetes.storage.accessMode",
        fix="use ReadWriteMany, a per-pod cache (storage.type emptyDir or hostPath), or "
        f"pin the pods to one node (nodeSelector {HOSTNAME})",
    )


def check_gpus(plan: Plan, cluster: ClusterFacts | None) -> None:
    """A pod asking for more nvidia.com/gpu than the largest node's allocatable stays Pending."""
    if cluster is None or not cluster.nodes:
        return
    nodes = [n for n in cluster.nodes if not n.unschedulable] or list(cluster.nodes)
    largest = max(sorted(nodes, key=lambda n: n.name), key=lambda n: n.allocatable_gpus)
    for inst in plan.instances:
        # HAMi decode: the physical GPUs its slices sit on
        sliced = inst.role == "decode" and plan.slice is not None
        need = max(1, inst.tensor_parallel) if sliced else inst.gpu_count
        if need > largest.allocatable_gpus:
            raise SpecError(
                f"a {inst.role} pod asks for {need} {GPU}; the recorded cluster's largest "
                f"node, {largest.name}, has {largest.allocatable_gpus}",
                path=f"{inst.role}.tensorParallel",
                fix=f"use at most {largest.allocatable_gpus} GPUs per pod, or larger nodes",
            )


def check_roles(plan: Plan) -> None:
    """Settings a role cannot take, and mounts of volumes that do not exist."""
    for role, pod in plan.pods:
        path = f"{_path(role)}.kubernetes"
        own = _own_env(plan, role)
        for i, var in enumerate(pod.env):
            if var.name in own:
                raise SpecError(
                    f"env[{i}]: {var.name} is a variable pdctl sets in the {role} pods",
                    path=f"{path}.env", fix="choose another name (secrets go in `secrets`)",
                )
        # The section's account is for serve and prefill; decode and the EPP keep pdctl's.
        own_account = _where(plan.spec, role, "service_account_name") != "kubernetes"
        if pod.service_account_name and role in ("decode", "epp") and own_account:
            raise SpecError(
                f"the {role} pods run as the ServiceAccount pdctl renders for them (its RBAC "
                "is what they need)",
                path=f"{path}.serviceAccountName",
                fix="remove serviceAccountName here (serve and prefill take one)",
            )
        check_rdma(plan.spec, role, pod)
        names = {v.name for v in pod.volumes}
        for i, mount in enumerate(pod.volume_mounts):
            if mount.name not in names:
                raise SpecError(
                    f"volumeMounts[{i}] names volume {mount.name!r}, which `volumes` lacks",
                    path=f"{path}.volumeMounts",
                    fix="add the volume to `volumes` (of the role or the section)",
                )
            if mount.mount_path in ("/dev/shm", plan.spec.kubernetes.storage.mount):
                raise SpecError(
                    f"volumeMounts[{i}]: {mount.mount_path} is where pdctl mounts its own volume",
                    path=f"{path}.volumeMounts", fix="mount the volume somewhere else",
                )
    st = plan.spec.kubernetes.storage
    if st.type == "image" and not plan.spec.model.name.startswith(st.mount.rstrip("/") + "/"):
        raise SpecError(
            f"storage type image mounts the weights read-only at {st.mount}, but model.name "
            f"{plan.spec.model.name!r} is no path inside it",
            path="model.name",
            fix=f"set model.name to the model folder in the image, e.g. {st.mount}/<model>",
        )


SUFFIX = {
    "m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "Ki": 2**10,
    "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}


def amount(quantity: str) -> float:
    """A Kubernetes quantity as a number ('500m' -> 0.5, '64Gi' -> 64 * 2**30)."""
    number = quantity.rstrip("kmMGTPEi")
    return float(number) * SUFFIX[quantity[len(number) :]]


def check_limits(plan: Plan) -> None:
    """The API server refuses a limit below its request."""
    for role, pod in plan.pods:
        res = pod.resources
        if res.limits is None:
            continue
        for field in ("cpu", "memory", "ephemeral_storage"):
            request, limit = getattr(res, field), getattr(res.limits, field)
            if request is not None and limit is not None and amount(limit) < amount(request):
                alias = type(res).model_fields[field].alias
                raise SpecError(
                    f"limit {limit} is below the request {request}",
                    path=f"{_where(plan.spec, role, 'resources')}.resources.limits.{alias}",
                    fix=f"raise the limit to at least {request}, or lower the request",
                )


def check_rdma(spec: Spec, role: str, pod: PodSettings) -> None:
    """`rdma` belongs to engine pods; its Multus networks are pdctl's annotation."""
    if pod.rdma is None:
        return
    if role == "epp":
        raise SpecError(
            "the endpoint picker moves no KV cache and takes no RDMA",
            path="router.kubernetes.rdma",
            fix="remove it (kubernetes.rdma and prefill/decode.kubernetes.rdma are the engines')",
        )
    for field in ("annotations", "pod_annotations"):
        if pod.rdma.networks and MULTUS_ANNOTATION in getattr(pod, field):
            alias = "podAnnotations" if field == "pod_annotations" else field
            raise SpecError(
                f"{MULTUS_ANNOTATION} is the annotation pdctl writes from rdma.networks",
                path=f"{_where(spec, role, field)}.{alias}",
                fix="list the networks in rdma.networks only",
            )


def _where(spec: Spec, role: str, field: str) -> str:
    """`<role>.kubernetes` when the role's override sets `field`, else `kubernetes`."""
    section = spec.router if role == "epp" else getattr(spec, role, None)
    over = getattr(section, "kubernetes", None)
    return f"{_path(role)}.kubernetes" if over and field in over.model_fields_set else "kubernetes"


def _own_env(plan: Plan, role: str) -> set[str]:
    """The variables pdctl sets in a role's containers."""
    names = {"CUDA_VISIBLE_DEVICES", "HF_HOME", "VLLM_NIXL_SIDE_CHANNEL_HOST"}
    names |= {s.name for s in plan.secrets}
    for inst in plan.instances:
        if inst.role == role:
            names |= {k for k, _ in inst.env}
    return names


def check_kube(plan: Plan, cluster: ClusterFacts | None = None) -> None:
    check_roles(plan)
    check_limits(plan)
    check_claim(plan)
    check_gpus(plan, cluster)
