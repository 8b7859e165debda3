"""Which transports can move bytes between machines where each engine runs, decided from the
spec's RDMA declaration (`hosts[].rdmaDevices`, `kubernetes.rdma`): the environment RDMA
brings with it, and the spec's RDMA-only settings for a place without RDMA, refused where the
place certainly has none (a Kubernetes pod without `rdma`, a container on a host that lists
no `rdmaDevices`) and warned (`Caution`; `--strict` refuses) where the spec only does not say
(a conda or venv host without `rdmaDevices`). docs/phase2-bare-metal.md#transports."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from pdctl.errors import SpecError
from pdctl.plan.model import Caution, Instance, Plan
from pdctl.spec.kube import role_settings
from pdctl.spec.model import Host, Serve, Spec
from pdctl.spec.pd import Role
from pdctl.spec.rdma import Rdma

# UCX transports that need an RDMA device (openucx/ucx docs, UCX_TLS: rc/ud/dc and their
# verbs/mlx5 flavours; `ib` is the alias of all of them).
RDMA_TLS = frozenset(
    {
        "rc", "rc_v", "rc_x", "rc_verbs", "rc_mlx5", "ud", "ud_v", "ud_x", "ud_verbs", "ud_mlx5",
        "dc", "dc_x", "dc_mlx5", "ib",
    }
)
# vLLM's all2all backends that run over NVSHMEM/RDMA between nodes (vLLM 0.23.0
# vllm/config/parallel.py All2AllBackend: DeepEP's kernels use NVSHMEM's IB transports).
RDMA_ALL2ALL = ("deepep_high_throughput", "deepep_low_latency")
TCP_FIX = "keep tcp in UCX_TLS (e.g. tcp,sm,self,cuda_copy,cuda_ipc) or leave it unset"


def rdma_env(rdma: Rdma | None, expert_parallel: bool = False) -> list[tuple[str, str]]:
    """What a Kubernetes pod with RDMA exports for the HCAs the spec names: NCCL's, and for
    expert parallel NVSHMEM's (DeepEP's all2all)."""
    if rdma is None or not rdma.devices:
        return []
    return [("NCCL_IB_HCA", ",".join(rdma.devices)), *nvshmem_env(rdma.devices, expert_parallel)]


def role_rdma_env(spec: Spec, role: str, section: Serve | Role | None) -> list[tuple[str, str]]:
    """`rdma_env` of a role's pods (its section's kubernetes settings over the spec's)."""
    pod = role_settings(spec.kubernetes, role, section.kubernetes if section else None)
    return rdma_env(pod.rdma, section is not None and section.expert_parallel)


def nvshmem_env(devices: tuple[str, ...], expert_parallel: bool) -> list[tuple[str, str]]:
    """NVSHMEM_HCA_LIST (`hca:port`, NVSHMEM's environment docs) for expert-parallel engines:
    DeepEP's kernels reach the other nodes through NVSHMEM, which otherwise takes any HCA."""
    if not expert_parallel or not devices:
        return []
    return [("NVSHMEM_HCA_LIST", ",".join(f"{d}:1" for d in devices))]


def ucx_needs_rdma(env: dict[str, str]) -> str | None:
    """Why UCX with this environment has no transport between machines without RDMA, or None.
    UCX's default (`UCX_TLS` unset or `all`) includes tcp."""
    tls = env.get("UCX_TLS", "").strip()
    if tls and tls.lower() != "all":
        names = {t.split(":")[0].strip().lower() for t in tls.lstrip("^").split(",")}
        excluded = tls.startswith("^")
        if (excluded and "tcp" in names) or (not excluded and not names & {"tcp", "all"}):
            kind = "RDMA transports" if names & RDMA_TLS and not excluded else "no tcp"
            return f"UCX_TLS {tls} has {kind}" + ("" if kind == "no tcp" else " and no tcp")
    devices = env.get("UCX_NET_DEVICES", "").strip()
    if devices and devices.lower() != "all":
        entries = [d.strip() for d in devices.split(",") if d.strip()]
        if entries and all(":" in d for d in entries):  # mlx5_0:1 = HCA:port; a netdev has no ':'
            return f"UCX_NET_DEVICES {devices} names RDMA ports only (no network interface for tcp)"
    return None


def _env_path(plan: Plan, role: str, key: str) -> str:
    section = getattr(plan.spec, role, None)
    if section is not None and key in getattr(section, "env", {}):
        return f"{role}.env.{key}"
    return f"engine.env.{key}"


def _all2all(plan: Plan, role: str) -> tuple[str, str] | None:
    """(path, backend) of a DeepEP all2all backend the role's engines are given, if any."""
    section = getattr(plan.spec, role, None)
    for path, args in (
        (f"{role}.extraArgs", getattr(section, "extra_args", ())),
        ("engine.extraArgs", plan.spec.engine.extra_args),
    ):
        for i, arg in enumerate(args):
            name, _, value = arg.partition("=")
            if name.replace("_", "-") != "--all2all-backend":
                continue
            value = value or (args[i + 1] if i + 1 < len(args) else "")
            if value in RDMA_ALL2ALL:
                return f"{path}[{i}]", value
    return None


def _multinode(plan: Plan, role: str) -> bool:
    section = getattr(plan.spec, role, None)
    return getattr(section, "nodes", 1) > 1


def check_kube(plan: Plan) -> None:
    """Kubernetes: a role whose pods get no `rdma` cannot use RDMA-only transports."""
    for inst in plan.instances:
        if plan.pod(inst.role).rdma is not None:
            continue
        where = f"the {inst.role} pods get no RDMA (no kubernetes.rdma)"
        fix = f"give them RDMA (kubernetes.rdma or {inst.role}.kubernetes.rdma), or "
        why = ucx_needs_rdma(dict(inst.env)) if _nixl(plan) else None
        if why is not None:
            key = "UCX_TLS" if why.startswith("UCX_TLS") else "UCX_NET_DEVICES"
            raise SpecError(
                f"{why}: {where}, so NIXL moves no KV between pods on different nodes",
                path=_env_path(plan, inst.role, key), fix=fix + TCP_FIX,
            )
        found = _all2all(plan, inst.role) if _multinode(plan, inst.role) else None
        if found is not None:
            raise SpecError(
                f"--all2all-backend {found[1]} runs DeepEP over NVSHMEM's RDMA transports: {where}",
                path=found[0],
                fix=fix + "drop it (vLLM's default all2all runs over NCCL, TCP included)",
            )


def _nixl(plan: Plan) -> bool:
    return plan.shape is not None and plan.shape.dis.connector == "nixl"


def _nodes(instances: Iterable[Instance]) -> list[Instance]:
    return [n for inst in instances for n in (inst, *inst.workers)]


def check_hosts(plan: Plan) -> tuple[Caution, ...]:
    """Hosts: RDMA-only settings where a host lists no `rdmaDevices`: refused in containers
    (pdctl passes /dev/infiniband only for hosts that list them), warned elsewhere."""
    nodes = [n for n in _nodes(plan.instances) if n.host is not None]
    index = {h.name: i for i, h in enumerate(plan.spec.hosts)}
    spans = len({n.host.name for n in nodes if n.host is not None}) > 1
    dis = plan.shape.dis if plan.shape is not None else None
    # path -> (what needs RDMA, how else, the hosts without it)
    needs: dict[str, tuple[str, str, dict[str, Host]]] = {}
    for node in nodes:
        host = node.host
        assert host is not None
        if host.rdma_devices:
            continue
        found: list[tuple[str, str, str]] = []
        why = ucx_needs_rdma(dict(node.env)) if _nixl(plan) and spans else None
        if why is not None:
            key = "UCX_TLS" if why.startswith("UCX_TLS") else "UCX_NET_DEVICES"
            found.append((_env_path(plan, node.role, key), f"{why}, so NIXL", TCP_FIX))
        backend = _all2all(plan, node.role) if _multinode(plan, node.role) else None
        if backend is not None:
            found.append(
                (
                    backend[0], f"--all2all-backend {backend[1]} runs DeepEP over RDMA",
                    "drop it (the default all2all runs over NCCL, TCP included)",
                )
            )
        if dis is not None and dis.connector == "mooncake" and dis.protocol == "rdma":
            found.append(("disaggregation.protocol", "Mooncake over RDMA", "use protocol tcp"))
        for path, what, how in found:
            needs.setdefault(path, (what, how, {}))[2][host.name] = host
    out = []
    for path, (what, how, hosts) in needs.items():
        names = ", ".join(hosts)
        lists = f"host {names} lists" if len(hosts) == 1 else f"hosts {names} list"
        fix = (
            f"list the HCAs in hosts[{', '.join(str(index[h]) for h in hosts)}].rdmaDevices, "
            f"or {how}"
        )
        docker = [h for h, host in hosts.items() if host.runtime == "docker"]
        if docker:
            hosts_ = (
                f"host {docker[0]} lists" if len(docker) == 1 else f"hosts {', '.join(docker)} list"
            )
            raise SpecError(
                f"{what} needs RDMA, and runtime docker {hosts_} no rdmaDevices: its "
                "containers get no /dev/infiniband",
                path=path, fix=fix,
            )
        out.append(Caution(path, f"{what} needs RDMA, and {lists} no rdmaDevices", fix))
    return tuple(out)


def check_leaders(plan: Plan) -> tuple[Caution, ...]:
    """Hosts: a multi-node group meets at its leader's peer address (`--master-addr`,
    `--data-parallel-address`), where vLLM's ZMQ sockets bind and connect; some vLLM builds'
    ZMQ did not resolve names (kserve PR #5155 resolves the leader's name first). On
    Kubernetes the pods resolve it at start (plan/group.py RESOLVE_LEADER); on hosts a name
    is warned."""
    index = {h.name: i for i, h in enumerate(plan.spec.hosts)}
    out: dict[str, Caution] = {}
    for inst in plan.instances:
        host = inst.host
        if not inst.workers or host is None:
            continue
        address = host.address_for_peers or host.address
        try:
            ipaddress.ip_address(address)
            continue
        except ValueError:
            pass
        field = "addressForPeers" if host.address_for_peers else "address"
        path = f"hosts[{index[host.name]}].{field}"
        out[path] = Caution(
            path,
            f"{address} leads a multi-node group as a name: vLLM's ZMQ sockets bind and connect "
            "at the leader's address, and some vLLM builds' ZMQ do not resolve names",
            f"set hosts[{index[host.name]}].addressForPeers to the host's IP on the network "
            "the group's nodes share",
        )
    return tuple(out.values())
