"""Multi-node instances: which hosts form a group, ranks, the leader, the rendezvous port,
and the `vllm serve` flags and environment of every node (docs/multinode.md).

Two shapes, both vLLM's own launch (no Ray):
- TP x PP across nodes (`dataParallel: 1`): every node runs `--nnodes N --node-rank R
  --master-addr LEADER --master-port P`; nodes 1.. add `--headless` (vllm/entrypoints/cli/
  serve.py: run_headless starts a MultiprocExecutor that joins the leader's process group).
- Data parallel (+ expert parallel) across nodes: every node runs `--data-parallel-size D
  --data-parallel-size-local L --data-parallel-address LEADER --data-parallel-rpc-port P`;
  nodes 1.. add `--headless --data-parallel-start-rank R*L` (their engines hand-shake with
  the leader's, whose API server balances requests over all D ranks).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from pdctl.errors import SpecError
from pdctl.plan.model import Instance, Plan
from pdctl.plan.place import Slot
from pdctl.plan.shape import peer_address
from pdctl.plan.transport import nvshmem_env
from pdctl.spec.model import Host, Spec
from pdctl.spec.pd import Multinode

MASTER_PORT = 29501  # ParallelConfig.master_port's default
DP_RPC_PORT = 29550  # ParallelConfig.data_parallel_rpc_port's default

GroupKind = Literal["single", "tp", "dp"]


@dataclass(frozen=True)
class GroupShape:
    """The parallel shape of one instance and how it spans nodes."""

    path: str  # "serve", "prefill" or "decode"
    nodes: int
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    expert_parallel: bool
    rendezvous_port: int | None

    @property
    def kind(self) -> GroupKind:
        if self.data_parallel > 1:
            return "dp"
        return "tp" if self.nodes > 1 else "single"

    @property
    def multinode(self) -> bool:
        return self.nodes > 1

    @property
    def gpus(self) -> int:
        """GPUs of the whole instance."""
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    @property
    def per_node(self) -> int:
        """GPUs on each node of the instance."""
        return self.gpus // self.nodes

    @property
    def local_dp(self) -> int:
        return self.data_parallel // self.nodes

    @property
    def base_port(self) -> int:
        default = DP_RPC_PORT if self.kind == "dp" else MASTER_PORT
        return self.rendezvous_port or default


def group_shape(section: Multinode, path: str, pipeline_parallel: int = 1) -> GroupShape:
    """The shape of `section` (serve, prefill or decode), checked: ranks divide evenly."""
    tp = getattr(section, "tensor_parallel", 1)
    shape = GroupShape(
        path=path, nodes=section.nodes, tensor_parallel=tp, pipeline_parallel=pipeline_parallel,
        data_parallel=section.data_parallel, expert_parallel=section.expert_parallel,
        rendezvous_port=section.rendezvous_port,
    )
    n = shape.nodes
    if shape.data_parallel > 1 and shape.data_parallel % n:
        fits = [d for d in range(n, 2 * shape.data_parallel + n, n)][:3]
        raise SpecError(
            f"dataParallel {shape.data_parallel} does not spread evenly over {n} nodes "
            "(each node runs dataParallel / nodes ranks)",
            path=f"{path}.dataParallel",
            fix="use a multiple of nodes, e.g. " + ", ".join(map(str, fits)),
        )
    width = tp * pipeline_parallel
    if shape.kind == "tp" and width % n:
        raise SpecError(
            f"tensorParallel x pipelineParallel = {width} does not split evenly over {n} nodes",
            path=f"{path}.nodes", fix="use a number of nodes that divides " + str(width),
        )
    if shape.expert_parallel and tp * shape.data_parallel == 1:
        raise SpecError(
            "expertParallel needs more than one GPU per instance (tensorParallel x "
            "dataParallel > 1): the experts are sharded over those ranks",
            path=f"{path}.expertParallel",
            fix="raise dataParallel (wide EP) or tensorParallel, or drop expertParallel",
        )
    return shape


def group_hosts(
    slots: Sequence[Slot], shape: GroupShape, replicas: int, hosts: Sequence[Host]
) -> list[list[Slot]]:
    """Deal placed node slots to instances: each instance's nodes on distinct hosts, the
    leader on the first of them in spec order. `slots` holds replicas x nodes slots."""
    if not shape.multinode:
        return [[s] for s in slots]
    order = {h.name: i for i, h in enumerate(hosts)}
    queues: dict[str, list[Slot]] = {}
    for slot in slots:
        queues.setdefault(slot.host.name, []).append(slot)
    out = []
    for index in range(replicas):
        room = [h for h, q in queues.items() if q]
        if len(room) < shape.nodes:
            ordered = sorted(room, key=lambda h: order[h])
            where = ", ".join(f"{h}: {len(queues[h])}" for h in ordered)
            raise SpecError(
                f"{shape.path} instance {index + 1} of {replicas} spans {shape.nodes} nodes, "
                f"each on its own host, but only {len(room)} hosts have room left for a node "
                f"of {shape.per_node} GPUs ({where or 'none'})",
                path=f"{shape.path}.nodes",
                fix="add hosts, lower the replicas, or fit fewer nodes per instance",
            )
        chosen = sorted(room, key=lambda h: (-len(queues[h]), order[h]))[: shape.nodes]
        out.append([queues[h].pop(0) for h in sorted(chosen, key=lambda h: order[h])])
    return out


def group_flags(shape: GroupShape, rank: int, leader: str, port: int) -> list[tuple[str, str]]:
    """The multi-node flags of node `rank` (value "" = a switch); `leader` is the leader's
    address for peers, `port` its rendezvous port."""
    flags: list[tuple[str, str]] = []
    if shape.kind == "tp":
        flags += [
            ("--nnodes", str(shape.nodes)), ("--node-rank", str(rank)), ("--master-addr", leader),
            ("--master-port", str(port)),
        ]
    elif shape.kind == "dp":
        flags.append(("--data-parallel-size", str(shape.data_parallel)))
        if shape.multinode:
            flags += [
                ("--data-parallel-size-local", str(shape.local_dp)),
                ("--data-parallel-address", leader), ("--data-parallel-rpc-port", str(port)),
            ]
            if rank > 0:
                flags.append(("--data-parallel-start-rank", str(rank * shape.local_dp)))
    if shape.expert_parallel:
        flags.append(("--enable-expert-parallel", ""))
    if rank > 0:
        flags.append(("--headless", ""))
    return flags


def group_env(host: Host) -> list[tuple[str, str]]:
    """NCCL and Gloo interface selection of one node (from the spec's host fields)."""
    env: list[tuple[str, str]] = []
    if host.network_interface:
        env += [
            ("GLOO_SOCKET_IFNAME", host.network_interface),
            ("NCCL_SOCKET_IFNAME", host.network_interface),
        ]
    if host.rdma_devices:
        env.append(("NCCL_IB_HCA", ",".join(host.rdma_devices)))
    return env


def lws_flags(shape: GroupShape, worker: bool) -> list[tuple[str, str]]:
    """The flags every pod of a LeaderWorkerSet group shares (leader or worker template); the
    per-pod ones come from `lws_launch`."""
    flags: list[tuple[str, str]] = []
    if shape.kind == "tp":
        flags += [("--nnodes", str(shape.nodes)), ("--master-port", str(shape.base_port))]
    else:
        flags += [
            ("--data-parallel-size", str(shape.data_parallel)),
            ("--data-parallel-size-local", str(shape.local_dp)),
            ("--data-parallel-rpc-port", str(shape.base_port)),
        ]
    if shape.expert_parallel:
        flags.append(("--enable-expert-parallel", ""))
    if worker:
        flags.append(("--headless", ""))
    return flags


# LWS_LEADER_ADDRESS is the leader pod's DNS name (<lws>-<group>.<lws>.<namespace>). vLLM
# passes --master-addr / --data-parallel-address to ZMQ and torch.distributed, and some vLLM
# builds' ZMQ did not resolve names (kserve PR #5155 resolves it with getent): every pod
# resolves it to an IP first (IPv4, else any), waiting for the headless Service's DNS record
# for up to RESOLVE_TRIES x 2 s, and stops with one line when it cannot.
RESOLVE_TRIES = 60
RESOLVE_LEADER = (
    'i=0; until leader="$(getent ahostsv4 "$LWS_LEADER_ADDRESS" || '
    'getent hosts "$LWS_LEADER_ADDRESS")"; do i=$((i + 1)); '
    f'if [ "$i" -ge {RESOLVE_TRIES} ]; then '
    'echo "pdctl: cannot resolve the group leader LWS_LEADER_ADDRESS=$LWS_LEADER_ADDRESS '
    f'to an IP address (getent, {RESOLVE_TRIES * 2} s): check the cluster DNS and the '
    "LeaderWorkerSet's headless Service\" >&2; exit 1; fi; sleep 2; done; "
    'leader="${leader%%[[:space:]]*}"; '
)


def lws_launch(shape: GroupShape, worker: bool, side_port: int | None = None) -> tuple[str, ...]:
    """The container command of a LeaderWorkerSet pod: a shell that resolves the leader's name
    (RESOLVE_LEADER), then runs `vllm serve` with the container's args ("$@") plus the rank
    flags from the variables LWS puts in every container (LWS_LEADER_ADDRESS: the leader pod's
    DNS name; LWS_WORKER_INDEX: 0 for the leader, 1.. for the workers). `side_port` (NIXL,
    data parallel): vLLM listens on VLLM_NIXL_SIDE_CHANNEL_PORT + the global DP rank, so every
    pod's base is lowered by its first rank and each pod's ranks listen on side_port,
    side_port + 1, ..."""
    script = 'exec vllm serve "$@"'
    if shape.kind == "tp":
        script += ' --node-rank "$LWS_WORKER_INDEX" --master-addr "$leader"'
    else:
        script += ' --data-parallel-address "$leader"'
        if worker:
            script += f' --data-parallel-start-rank "$((LWS_WORKER_INDEX * {shape.local_dp}))"'
        if side_port is not None:
            first = f"LWS_WORKER_INDEX * {shape.local_dp}"
            script = f'export VLLM_NIXL_SIDE_CHANNEL_PORT="$(({side_port} - {first}))"; ' + script
    return ("/bin/sh", "-c", RESOLVE_LEADER + script, "vllm")


def kube_group(
    leader: Instance, shape: GroupShape, worker_args: tuple[str, ...], side_port: int
) -> Instance:
    """A prefill or decode pod template (llm-d, NIXL) as the leader of a LeaderWorkerSet group
    when `shape` spans nodes: the leader serves HTTP, `nodes - 1` headless workers join it.
    Each pod holds `shape.per_node` GPUs and, with data parallel, one NIXL side channel per
    local rank."""
    if not shape.multinode:
        return leader
    side = side_port if shape.kind == "dp" else None
    ports = leader.extra_ports
    if side is not None:
        ports = tuple((f"nixl-{j}" if j else "nixl", side + j) for j in range(shape.local_dp))
    worker = replace(
        leader, name=f"{leader.name}-worker", args=worker_args,
        replicas=shape.nodes - 1,  # worker pods per group
        leader=leader.name, launch=lws_launch(shape, worker=True, side_port=side),
        extra_ports=ports,
    )
    return replace(
        leader, launch=lws_launch(shape, worker=False, side_port=side), workers=(worker,),
        extra_ports=ports,
    )


def refuse_kube_groups(spec: Spec) -> None:
    """Prefill/decode on Kubernetes (llm-d): a multi-node role is a LeaderWorkerSet of whole
    GPUs, so it cannot also be phase 3's HAMi slices (one slice is one pod's share of a GPU)."""
    share = spec.decode.share if spec.decode is not None else None
    for path, section in (("prefill", spec.prefill), ("decode", spec.decode)):
        if share is not None and section is not None and section.nodes > 1:
            raise SpecError(
                f"{path} spans {section.nodes} nodes while decode.share slices GPUs (HAMi): "
                "a multi-node group on Kubernetes is a LeaderWorkerSet of whole GPUs",
                path=f"{path}.nodes",
                fix="use nodes: 1 with decode.share, or drop decode.share (phase 2)",
            )


LWS_KIND = ("leaderworkerset.x-k8s.io", "LeaderWorkerSet")


def group_kinds(plan: Plan) -> tuple[tuple[str, str], ...]:
    """The custom kinds multi-node instances need on Kubernetes (LeaderWorkerSet)."""
    if plan.on_kubernetes and any(i.workers for i in plan.instances):
        return tuple(sorted({*plan.kinds, LWS_KIND}))
    return plan.kinds


GROUP_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NVSHMEM_HCA_LIST")


def join(nodes: Sequence[Instance]) -> Instance:
    """The leader instance holding its workers (each naming the leader)."""
    leader, rest = nodes[0], nodes[1:]
    workers = tuple(replace(w, leader=leader.name) for w in rest)
    return replace(leader, workers=workers)


def all_nodes(instances: Sequence[Instance]) -> list[Instance]:
    """Every engine process: each instance followed by its group's workers."""
    return [n for inst in instances for n in (inst, *inst.workers)]


class Rendezvous:
    """Rendezvous ports per leader host: the k-th group led from a host takes base + k."""

    def __init__(self) -> None:
        self.taken: dict[tuple[str, int], int] = {}

    def port(self, host: Host, shape: GroupShape) -> int:
        key = (host.name, shape.base_port)
        k = self.taken.get(key, 0)
        self.taken[key] = k + 1
        port = shape.base_port + k
        if port > 65535:
            raise SpecError(
                f"group {k + 1} led from host {host.name} would meet on port {port}",
                path=f"{shape.path}.rendezvousPort", fix="lower rendezvousPort",
            )
        return port


@dataclass(frozen=True)
class GroupNode:
    """One node of a placed instance: its slot, its process name, its multi-node flags
    (group_flags) and, on a multi-node group's leader, the rendezvous port it listens on."""

    index: int  # the instance's
    rank: int
    slot: Slot
    name: str  # `<name>-<index>`, a worker's with `-node<rank>` after it
    flags: list[tuple[str, str]]
    extra_ports: tuple[tuple[str, int], ...]

    @property
    def gpu_env(self) -> list[tuple[str, str]]:
        """CUDA_VISIBLE_DEVICES of the node's GPUs (none without GPUs: CPU engines)."""
        gpus = self.slot.gpus
        return [("CUDA_VISIBLE_DEVICES", ",".join(map(str, gpus)))] if gpus else []


def placed_groups(
    slots: Sequence[Slot], shape: GroupShape, replicas: int, hosts: Sequence[Host], name: str,
    meet: Rendezvous,
) -> Iterator[list[GroupNode]]:
    """Each instance's nodes (group_hosts), named `<name>-<index>`; a multi-node group meets
    on the port `meet` gives its leader (one Rendezvous per plan: ports are per host)."""
    for index, nodes in enumerate(group_hosts(slots, shape, replicas, hosts)):
        leader = nodes[0].host
        port = meet.port(leader, shape) if shape.multinode else 0
        first = f"{name}-{index}"
        yield [
            GroupNode(
                index, rank, slot, f"{first}-node{rank}" if rank else first,
                group_flags(shape, rank, peer_address(leader), port),
                (("rendezvous", port),) if rank == 0 and shape.multinode else (),
            )
            for rank, slot in enumerate(nodes)
        ]


def node_env(host: Host, shape: GroupShape, interfaces: bool) -> list[tuple[str, str]]:
    """VLLM_HOST_IP of a group's node, with `interfaces` its NCCL and Gloo interfaces
    (group_env), and on a multi-node group NVSHMEM's HCAs (expert parallel)."""
    env = [("VLLM_HOST_IP", peer_address(host)), *(group_env(host) if interfaces else [])]
    if shape.multinode:
        env += nvshmem_env(host.rdma_devices, shape.expert_parallel)
    return env
