"""Kubernetes instances for phases 2 and 3 (llm-d): one prefill and one decode pod template."""

from __future__ import annotations

from typing import Literal

from pdctl.compat import LLMD, Release
from pdctl.errors import SpecError
from pdctl.plan.args import batch_limit
from pdctl.plan.group import LWS_KIND, GroupShape, group_shape, kube_group, lws_flags
from pdctl.plan.kv import nixl_config
from pdctl.plan.model import Instance
from pdctl.plan.pd import role_args, role_env
from pdctl.plan.shape import PdShape
from pdctl.plan.slice import Slice
from pdctl.plan.transport import role_rdma_env
from pdctl.spec.model import Spec
from pdctl.spec.pd import Role
from pdctl.spec.value import label_value

K8S_PREFILL_PORT = 8000
K8S_DECODE_PORT = 8200  # behind the llm-d routing sidecar on 8000
K8S_SIDE_CHANNEL_PORT = 5600
# Set by the renderer from the pod IP (pd_kube), so not in the instance's env pairs.
OWNED_ENV = ("VLLM_NIXL_SIDE_CHANNEL_HOST",)
GATEWAY_NAME_LABEL = "gateway.networking.k8s.io/gateway-name"


def gateway_pod_labels(spec: Spec) -> dict[str, str]:
    """The labels of the pods that may send requests to the decode pods (with networkPolicy)."""
    k8s = spec.kubernetes
    if k8s.gateway_pod_labels:
        return dict(sorted(k8s.gateway_pod_labels.items()))
    gateway = spec.router.gateway
    fix = "set kubernetes.gatewayPodLabels to the labels of your Gateway's proxy pods"
    if not gateway:
        raise SpecError(
            "networkPolicy needs to know which pods may send requests to the decode pods",
            path="kubernetes.networkPolicy", fix=f"set router.gateway, or {fix}",
        )
    try:
        label_value(gateway)
    except ValueError:
        raise SpecError(
            f"the Gateway name {gateway!r} cannot be the label value that selects its pods",
            path="kubernetes.gatewayPodLabels", fix=fix,
        ) from None
    return {GATEWAY_NAME_LABEL: gateway}


def check_llmd(spec: Spec, phase: int, shape: PdShape) -> tuple[tuple[str, str], ...]:
    """What an llm-d bundle cannot be (before the slice is planned); the labels of the pods
    that may send requests to the decode pods when there is a networkPolicy."""
    if shape.dis.connector != "nixl":
        raise SpecError(
            f"phase {phase} on Kubernetes renders llm-d, which pdctl wires with NIXL "
            f"(not {shape.dis.connector})",
            path="disaggregation.connector",
            fix="use connector nixl, or render phase 2 with --target hosts",
        )
    if not spec.kubernetes.network_policy:
        return ()
    # refuse a policy that would lock every client out
    return tuple(gateway_pod_labels(spec).items())


def kube_instances(
    spec: Spec, release: Release, phase: int, shape: PdShape, sl: Slice | None
) -> tuple[Instance, ...]:
    """The llm-d step: one prefill and one decode pod template (`sl`: phase 3's slice); a role
    that spans nodes leads a LeaderWorkerSet group (plan/group.py kube_group)."""
    dis = shape.dis
    pre, dec = shape.prefill, shape.decode
    pre_g, dec_g = group_shape(pre, "prefill"), group_shape(dec, "decode")
    cpu = spec.engine.device == "cpu"
    side = ("VLLM_NIXL_SIDE_CHANNEL_PORT", str(K8S_SIDE_CHANNEL_PORT))
    buffer = dis.kv_buffer_device or ("cpu" if cpu else None)
    pre_over: dict = {}
    if phase == 3 and not cpu and pre.tensor_parallel > 1:
        # Prefill keeps whole GPUs, but HAMi's device plugin preloads HAMi-core into every
        # container it allocates for, and custom all-reduce's CUDA IPC fails under it (HAMi
        # #1947; whole-GPU TP 8 also crashed in HAMi-core, HAMi #1764): use NCCL's all-reduce.
        pre_over["switches"] = ("--disable-custom-all-reduce",)

    pre_kv = nixl_config(LLMD.prefill_role, buffer)
    prefill = _role_instance(
        spec, release, "prefill", pre, pre_g, K8S_PREFILL_PORT, pre_kv, pre_over, side
    )
    over: dict = {}
    if sl is not None:
        over = {"gpu_memory_utilization": sl.gpu_memory_utilization}
        over["enforce_eager"] = sl.enforce_eager
        if dec.tensor_parallel > 1:
            over["switches"] = ("--disable-custom-all-reduce",)
    dec_kv = nixl_config(LLMD.decode_role, buffer)
    decode = _role_instance(
        spec, release, "decode", dec, dec_g, K8S_DECODE_PORT, dec_kv, over, side
    )
    return (prefill, decode)


def _role_instance(
    spec: Spec, release: Release, role: Literal["prefill", "decode"], section: Role, g: GroupShape,
    port: int, kv: dict, over: dict, side: tuple[str, str],
) -> Instance:
    """The pod template of one role (`over`: its role_args overrides); a role that spans nodes
    leads a LeaderWorkerSet group of headless workers."""
    cpu = spec.engine.device == "cpu"
    leader_over = {**over, "flags": lws_flags(g, worker=False)} if g.multinode else over
    instance = Instance(
        name=f"{spec.name}-{role}", role=role, index=0, port=port,
        args=role_args(spec, release, section, role, port, kv, **dict(leader_over)),
        env=role_env(
            spec, section, role, side, *role_rdma_env(spec, role, section), owned=OWNED_ENV
        ),
        gpu_count=0 if cpu else (g.per_node if g.multinode else section.tensor_parallel),
        tensor_parallel=section.tensor_parallel, replicas=section.replicas,
        extra_ports=(("nixl", K8S_SIDE_CHANNEL_PORT),),
        max_num_seqs=batch_limit(section.max_num_seqs, spec, section.extra_args),
    )
    if g.multinode:
        worker_over = {**over, "flags": lws_flags(g, worker=True)}
        worker = role_args(spec, release, section, role, port, kv, **worker_over)
        instance = kube_group(instance, g, worker, K8S_SIDE_CHANNEL_PORT)
    return instance


def custom_kinds(spec: Spec) -> tuple[tuple[str, str], ...]:
    """(group, kind) of the custom resources an llm-d bundle holds: their CRDs must exist."""
    kinds = {(LLMD.pool_api.split("/")[0], "InferencePool")}
    if spec.router.gateway:
        kinds.add(("gateway.networking.k8s.io", "HTTPRoute"))
    if any(r is not None and r.nodes > 1 for r in (spec.prefill, spec.decode)):
        kinds.add(LWS_KIND)  # multi-node roles are LeaderWorkerSets
    return tuple(sorted(kinds))
