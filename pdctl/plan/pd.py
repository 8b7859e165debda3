"""Stage 2 of a phase 2/3 plan on hosts: place the prefill and decode engines and give each its
KV transfer config, ports and environment (role_args/role_env serve llm-d too)."""

from __future__ import annotations

import json
import math

from pdctl.compat import Release
from pdctl.errors import SpecError
from pdctl.plan.args import batch_limit, engine_args
from pdctl.plan.group import Rendezvous, group_shape, join, node_env, placed_groups
from pdctl.plan.hami_host import SLICE_ENV, check_host_slice, pack, slice_engine, slice_groups
from pdctl.plan.kv import (
    P2P_ENV,
    kv_args,
    kv_lease_s,
    mooncake_config,
    mooncake_env,
    nixl_config,
    p2p_config,
)
from pdctl.plan.lora import lora_env
from pdctl.plan.model import Instance
from pdctl.plan.offload import offload_env
from pdctl.plan.place import Chooser, Group, place
from pdctl.plan.shape import PdShape, check_shape, master_host, peer_address, router_host
from pdctl.plan.slice import Slice
from pdctl.spec.model import Host, Spec
from pdctl.spec.pd import Role
from pdctl.spec.value import host_port

GIB = 1024**3


# Variables pdctl sets on prefill/decode engines from the placement, and the spec field that
# sets them instead.
PD_ENV = {
    "CUDA_VISIBLE_DEVICES": "the GPUs it places (hosts[].gpus)",
    "VLLM_HOST_IP": "hosts[].addressForPeers (or address)",
    "VLLM_NIXL_SIDE_CHANNEL_HOST": "hosts[].addressForPeers (or address; on Kubernetes the "
    "pod IP)",
    "VLLM_NIXL_SIDE_CHANNEL_PORT": "disaggregation.sideChannelPort",
    "VLLM_MOONCAKE_BOOTSTRAP_PORT": "disaggregation.bootstrapPort",
    "MOONCAKE_CONFIG_PATH": "disaggregation.store (pdctl writes mooncake.json)",
    "MC_TCP_BIND_ADDRESS": "hosts[].addressForPeers (or address)",
    "NCCL_IB_HCA": "hosts[].rdmaDevices (multi-node groups; on Kubernetes rdma.devices)",
    "NVSHMEM_HCA_LIST": "hosts[].rdmaDevices (expert-parallel groups; on Kubernetes "
    "rdma.devices)",
    "VLLM_DISABLE_REQUEST_ID_RANDOMIZATION": "disaggregation.connector p2p-nccl (its KV "
    "tensors are keyed by the router's request id, which vLLM must keep as it is)",
    **SLICE_ENV,  # phase 3 on hosts: HAMi-core's variables (plan.hami_host)
}


def role_env(
    spec: Spec, role: Role, path: str, *pairs: tuple[str, str], owned: tuple[str, ...] = ()
) -> tuple[tuple[str, str], ...]:
    """engine.env + <role>.env + pdctl's placement values. A user value for a variable pdctl
    sets (in `pairs`, or `owned` when the renderer sets it) is a spec error: it would silently
    point KV transfer at the wrong address, port or GPU."""
    ours = dict(pairs)
    for field, env in (("engine.env", spec.engine.env), (f"{path}.env", role.env)):
        for key in env:
            if key in ours or key in owned:
                raise SpecError(
                    f"{key} is set by pdctl for {path} engines", path=f"{field}.{key}",
                    fix=f"remove {key}; pdctl sets it from {PD_ENV.get(key, 'the placement')}",
                )
    ours = {**offload_env(spec, role.tensor_parallel), **ours}
    return tuple(sorted({**spec.engine.env, **role.env, **lora_env(spec), **ours}.items()))


# Flags pdctl sets itself for PD; a second copy in extraArgs would fight it.
OWNED_FLAGS = ("--kv-transfer-config", "--port", "--host")


def _check_owned(args: tuple[str, ...], path: str) -> None:
    for i, arg in enumerate(args):
        if arg.split("=", 1)[0].replace("_", "-") in OWNED_FLAGS:
            raise SpecError(
                f"{arg.split('=', 1)[0]} is set by pdctl for prefill/decode", path=f"{path}[{i}]",
                fix="remove it; use the disaggregation and port fields instead",
            )


def role_args(
    spec: Spec, release: Release, role: Role, path: str, port: int, kv: dict, **over
) -> tuple[str, ...]:
    _check_owned(spec.engine.extra_args, "engine.extraArgs")
    _check_owned(role.extra_args, f"{path}.extraArgs")
    extra = list(kv_args(kv, release))
    extra += over.pop("flags", ())
    for flag in over.pop("switches", ()):
        extra.append((flag, ""))
    return engine_args(
        spec, release, port=port, tensor_parallel=role.tensor_parallel,
        gpu_memory_utilization=over.pop("gpu_memory_utilization", role.gpu_memory_utilization),
        max_num_seqs=role.max_num_seqs, max_num_batched_tokens=role.max_num_batched_tokens,
        enforce_eager=over.pop("enforce_eager", role.enforce_eager), extra=extra,
        role_args=role.extra_args, role_path=path,
    )


def _placement_spec(spec: Spec, total: int) -> Spec:
    """CPU engines: a host holds an even share of the instances unless `instances` says."""
    if spec.engine.device != "cpu":
        return spec
    share = math.ceil(total / len(spec.hosts))
    hosts = tuple(
        h if h.instances is not None else h.model_copy(update={"instances": share})
        for h in spec.hosts
    )
    return spec.model_copy(update={"hosts": hosts})


def host_instances(
    spec: Spec, release: Release, shape: PdShape, choose: Chooser, sl: Slice | None = None
) -> tuple[Instance, ...]:
    """`sl`: phase 3's decode slice; decode then packs perGpu slices on each GPU set."""
    dis = shape.dis
    share = spec.decode.share if sl is not None and spec.decode is not None else None
    per_gpu = share.per_gpu if share is not None else 1
    if sl is not None:
        check_host_slice(spec, sl)
    check_shape(spec, shape)
    for i, host in enumerate(spec.hosts):
        # Engines in containers run on the host's network (render.container); RDMA inside one
        # needs /dev/infiniband, which pdctl passes for the hosts that list rdmaDevices.
        if (
            host.runtime == "docker"
            and dis.connector == "mooncake"
            and dis.protocol == "rdma"
            and not host.rdma_devices
        ):
            raise SpecError(
                f"host {host.name}: Mooncake over RDMA in a container needs the host's RDMA "
                "devices passed in, and the host lists none",
                path=f"hosts[{i}].rdmaDevices",
                fix="list the host's HCAs (e.g. [mlx5_0]) so pdctl passes /dev/infiniband, "
                "IPC_LOCK and memlock to the engine containers",
            )
    cpu = spec.engine.device == "cpu"
    roles: list[tuple[str, Role]] = [("prefill", shape.prefill), ("decode", shape.decode)]
    shapes = {name: group_shape(role, name) for name, role in roles}
    for name, gs in shapes.items():
        if gs.multinode and dis.connector != "nixl":
            raise SpecError(
                f"{name} spans {gs.nodes} nodes, which pdctl runs with NIXL only (llm-d's "
                f"wide-EP shape); {dis.connector} gives each engine ports pdctl cannot spread "
                "over a group's data-parallel ranks",
                path=f"{name}.nodes", fix="set disaggregation.connector: nixl, or nodes: 1",
            )
    groups = [
        Group(
            name, role.replicas * shapes[name].nodes, 0 if cpu else shapes[name].per_node,
            role.port or (8100 if name == "prefill" else 8200), f"{name}.replicas",
        )
        for name, role in roles
    ]
    groups = slice_groups(groups, per_gpu)
    total = sum(g.replicas for g in groups)
    slots = place(_placement_spec(spec, total), groups, choose)
    if per_gpu > 1:
        slots = pack(slots, shape.decode.replicas, per_gpu, groups[1].base_port)
    proxy = (peer_address(router_host(spec)), spec.router.discovery_port)
    blocks: dict[str, int] = {}  # next free p2p-nccl kv_port offset per host
    singles: dict[str, int] = {}  # next offset per host: bootstrap / NIXL side-channel port
    meet = Rendezvous()
    out = []
    for role_name, role in roles:
        gs = shapes[role_name]
        mine = [s for s in slots if s.role == role_name]
        prefix = f"{spec.name}-{role_name}"
        for nodes in placed_groups(mine, gs, role.replicas, spec.hosts, prefix, meet):
            members = []
            for node in nodes:
                slot, name = node.slot, node.name
                host = next(h for h in spec.hosts if h.name == slot.host.name)
                offset = blocks.get(host.name, 0)
                blocks[host.name] = offset + role.tensor_parallel
                pairs = node_env(host, gs, interfaces=gs.multinode) + node.gpu_env
                hami, over = slice_engine(spec, host, name, slot.role, role.tensor_parallel, sl)
                pairs += hami
                extra_ports = list(node.extra_ports)
                files: tuple[tuple[str, str], ...] = ()
                if dis.connector == "p2p-nccl":
                    kv_port = dis.kv_port + offset
                    extra_ports.append(("kv", kv_port))
                    pairs += P2P_ENV
                    kv = p2p_config(
                        dis, slot.role, kv_port=kv_port, http_port=slot.port, proxy=proxy
                    )
                elif dis.connector == "mooncake":
                    kv = mooncake_config(dis, slot.role, release.version)
                    pairs += mooncake_env(dis, spec.workload, spec.engine.env, role.env)
                    if slot.role == "prefill":
                        k = singles.get(host.name, 0)
                        singles[host.name] = k + 1
                        boot = dis.bootstrap_port + k
                        pairs.append(("VLLM_MOONCAKE_BOOTSTRAP_PORT", str(boot)))
                        extra_ports.append(("bootstrap", boot))
                    if dis.store.enabled:
                        path = f"{host.data_dir.rstrip('/')}/{spec.name}/{name}/mooncake.json"
                        pairs.append(("MOONCAKE_CONFIG_PATH", path))
                        pairs.append(("MC_TCP_BIND_ADDRESS", peer_address(host)))
                        files = (("mooncake.json", store_json(spec, host)),)
                else:
                    # One side channel per engine: vLLM adds the engine's data-parallel index
                    # (NixlConnectorScheduler: VLLM_NIXL_SIDE_CHANNEL_PORT + DP index), so a
                    # node of a DP group whose ranks start at R*L listens on base+R*L.. .
                    local = max(1, gs.local_dp if gs.kind == "dp" else 1)
                    first_rank = node.rank * local if gs.kind == "dp" else 0
                    k = singles.get(host.name, 0)
                    singles[host.name] = k + local
                    side = dis.side_channel_port + k
                    if side - first_rank < 1024:
                        raise SpecError(
                            f"{name}: its NIXL side channels would start below port 1024",
                            path="disaggregation.sideChannelPort", fix="raise sideChannelPort",
                        )
                    pairs += [
                        ("VLLM_NIXL_SIDE_CHANNEL_HOST", peer_address(host)),
                        ("VLLM_NIXL_SIDE_CHANNEL_PORT", str(side - first_rank)),
                    ]
                    extra_ports += [("nixl-side-channel", side + j) for j in range(local)]
                    device = dis.kv_buffer_device or ("cpu" if cpu else None)
                    kv = nixl_config(
                        "kv_producer" if slot.role == "prefill" else "kv_consumer", device,
                        kv_lease_s(spec.workload),
                    )
                members.append(
                    Instance(
                        name=name,
                        role=slot.role,  # type: ignore[arg-type]
                        index=node.index, port=slot.port,
                        args=role_args(
                            spec, release, role, slot.role, slot.port, kv, flags=node.flags, **over
                        ),
                        env=role_env(spec, role, slot.role, *pairs), host=host, gpus=slot.gpus,
                        gpu_count=len(slot.gpus), tensor_parallel=role.tensor_parallel,
                        extra_ports=tuple(extra_ports), files=files,
                        max_num_seqs=batch_limit(role.max_num_seqs, spec, role.extra_args),
                    )
                )
            out.append(join(members))
    return tuple(out)


def store_json(spec: Spec, host: Host) -> str:
    """The MOONCAKE_CONFIG_PATH document for MooncakeStoreConnector on one host."""
    dis = spec.disaggregation
    assert dis is not None
    store = dis.store
    master = master_host(spec)
    metadata = host_port(peer_address(master), store.metadata_port)
    doc = {
        "local_hostname": peer_address(host), "metadata_server": f"http://{metadata}/metadata",
        "master_server_address": host_port(peer_address(master), store.rpc_port),
        "global_segment_size": store.global_segment_gib * GIB,
        "local_buffer_size": store.local_buffer_gib * GIB, "mode": "embedded",
        "protocol": dis.protocol, "device_name": dis.device_name or "",
    }
    return json.dumps(doc, indent=2) + "\n"
