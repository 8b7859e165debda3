"""Plans for phases 0 and 1: identical engine instances (`serve`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pdctl.compat import Release
from pdctl.errors import SpecError
from pdctl.plan.args import batch_limit, engine_args
from pdctl.plan.group import (
    GroupNode,
    GroupShape,
    Rendezvous,
    group_flags,
    group_shape,
    join,
    lws_flags,
    lws_launch,
    node_env,
    placed_groups,
)
from pdctl.plan.lora import lora_env
from pdctl.plan.model import Instance, TargetName
from pdctl.plan.offload import offload_env
from pdctl.plan.place import Chooser, Group, place
from pdctl.plan.transport import role_rdma_env
from pdctl.spec.model import Serve, Spec

# Variables a multi-node or data-parallel group's engines get from the hosts (plan.group).
GROUP_ENV = {
    "VLLM_HOST_IP": "hosts[].addressForPeers", "GLOO_SOCKET_IFNAME": "hosts[].networkInterface",
    "NCCL_SOCKET_IFNAME": "hosts[].networkInterface", "NCCL_IB_HCA": "hosts[].rdmaDevices",
    "NVSHMEM_HCA_LIST": "hosts[].rdmaDevices (expertParallel)",
}


def serve_shape(spec: Spec, phase: int) -> Serve:
    if spec.serve is None:
        raise SpecError(
            f"phase {phase} needs a `serve` section (the engine shape)", path="serve",
            fix="add `serve: {replicas: 1, tensorParallel: 1}`",
        )
    return spec.serve


def check_cpu(spec: Spec, target: TargetName) -> None:
    """vLLM's CPU build is not what pdctl installs or pulls by default (pip `vllm` and the
    `vllm/vllm-openai` image are CUDA builds): say so at plan time, not at start."""
    docker = target == "kubernetes" or any(h.runtime == "docker" for h in spec.hosts)
    if docker and spec.engine.image is None:
        raise SpecError(
            "engine.device cpu needs a CPU image: the default vllm/vllm-openai is a CUDA build",
            path="engine.image", fix="set engine.image to a vLLM CPU image you built or pulled",
        )
    if target == "hosts":
        for i, host in enumerate(spec.hosts):
            if host.runtime == "conda":
                raise SpecError(
                    f"host {host.name}: engine.device cpu cannot use runtime conda, which "
                    "pip-installs the CUDA build of vLLM",
                    path=f"hosts[{i}].runtime",
                    fix="use runtime venv with `venv:` pointing at a prepared CPU build",
                )


def serve_instances(
    spec: Spec, release: Release, phase: int, target: TargetName, choose: Chooser
) -> tuple[Instance, ...]:
    shape = serve_shape(spec, phase)
    gshape = group_shape(shape, "serve", shape.pipeline_parallel)
    width = gshape.per_node
    if spec.engine.device == "cpu":
        width = 0
        check_cpu(spec, target)

    def args(port: int, flags: list[tuple[str, str]] | None = None) -> tuple[str, ...]:
        return engine_args(
            spec, release, port=port, tensor_parallel=shape.tensor_parallel,
            pipeline_parallel=shape.pipeline_parallel,
            gpu_memory_utilization=shape.gpu_memory_utilization, max_num_seqs=shape.max_num_seqs,
            max_num_batched_tokens=shape.max_num_batched_tokens, enforce_eager=shape.enforce_eager,
            enable_prefix_caching=shape.enable_prefix_caching, extra=flags or (),
            role_args=shape.extra_args, role_path="serve",
        )

    ranks = shape.tensor_parallel * shape.pipeline_parallel
    own = {**lora_env(spec), **offload_env(spec, ranks)}
    env = tuple(sorted({**spec.engine.env, **own}.items()))
    seqs = batch_limit(shape.max_num_seqs, spec, shape.extra_args)
    if target == "kubernetes":
        env = _with_rdma_env(spec, env)
        # One pod template; a multi-node group is a LeaderWorkerSet (render/lws.py), whose
        # leader address and ranks come from the LWS_* variables at run time.
        if not gshape.multinode:
            flags = group_flags(gshape, 0, "", 0)
            workers: tuple[Instance, ...] = ()
            launch: tuple[str, ...] = ()
        else:
            flags = lws_flags(gshape, worker=False)
            launch = lws_launch(gshape, worker=False)
            workers = (
                Instance(
                    name=f"{spec.name}-serve-worker", role="serve", index=0, port=8000,
                    args=args(8000, lws_flags(gshape, worker=True)), env=env, gpu_count=width,
                    tensor_parallel=shape.tensor_parallel,
                    replicas=gshape.nodes - 1,  # worker pods per group
                    leader=f"{spec.name}-serve", launch=lws_launch(gshape, worker=True),
                ),
            )
        return (
            Instance(
                name=f"{spec.name}-serve", role="serve", index=0, port=8000, args=args(8000, flags),
                env=env, gpu_count=width, tensor_parallel=shape.tensor_parallel,
                replicas=shape.replicas, workers=workers, launch=launch, max_num_seqs=seqs,
            ),
        )
    group = Group("serve", shape.replicas * gshape.nodes, width, shape.port, "serve.replicas")
    slots = place(spec, [group], choose)
    groups = placed_groups(
        slots, gshape, shape.replicas, spec.hosts, f"{spec.name}-serve", Rendezvous())
    return tuple(
        join([replace(_node(gshape, node, env, args), max_num_seqs=seqs) for node in nodes])
        for nodes in groups
    )


def _with_rdma_env(spec: Spec, env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """engine.env plus the HCA variables of serve pods with RDMA (plan/transport.py)."""
    extra = role_rdma_env(spec, "serve", spec.serve)
    for key, _ in extra:
        if key in dict(env):
            raise SpecError(
                f"{key} is set by pdctl from kubernetes.rdma.devices", path=f"engine.env.{key}",
                fix=f"remove {key}; pdctl sets it from rdma.devices",
            )
    return tuple(sorted({**dict(env), **dict(extra)}.items()))


def _node(
    gshape: GroupShape, node: GroupNode, env: tuple[tuple[str, str], ...],
    args: Callable[[int, list[tuple[str, str]]], tuple[str, ...]],
) -> Instance:
    slot, inst_env = node.slot, env
    if gshape.multinode or gshape.kind == "dp":
        extra = node_env(slot.host, gshape, interfaces=True)
        for key, _ in extra:
            if key in dict(env):
                raise SpecError(
                    f"{key} is set by pdctl on the engines of a multi-node or data-parallel "
                    f"group (from {GROUP_ENV[key]}); engine.env would be overwritten",
                    path="engine.env", fix=f"remove {key} from engine.env and set {GROUP_ENV[key]}",
                )
        inst_env = tuple(sorted({**dict(env), **dict(extra)}.items()))
    inst_env = (*node.gpu_env, *inst_env)
    # Containers listen on 8000 inside; the host port maps onto it (`-p PORT:8000`). A
    # multi-node group's nodes run on the host's network instead (NCCL and the rendezvous need
    # the host's ports and addresses: render.container), on the spec's port.
    # `network: host` runs a single-node engine there too.
    docker = slot.host.runtime == "docker" and slot.host.network == "bridge"
    docker = docker and not gshape.multinode
    return Instance(
        name=node.name, role="serve", index=node.index,
        port=slot.port, container_port=8000 if docker else None,
        args=args(8000 if docker else slot.port, node.flags), env=inst_env, host=slot.host,
        gpus=slot.gpus, gpu_count=len(slot.gpus), tensor_parallel=gshape.tensor_parallel,
        extra_ports=node.extra_ports,
    )
