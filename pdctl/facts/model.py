"""Facts about hosts and clusters: plain frozen data that probes gather and checks read."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pdctl.facts.group import Listen, Reach
from pdctl.facts.hami import HamiLibrary
from pdctl.facts.transfer import Transfer

# Link levels from `nvidia-smi topo -m`, best first (NV# is ranked by its link count).
PCIE_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
NVLINK = re.compile(r"^NV(\d+)$")


def link_rank(level: str) -> tuple[int, int]:
    """Sort key for a link level: smaller is better. NV# beats every PCIe path."""
    m = NVLINK.match(level)
    if m:
        return (0, -int(m.group(1)))
    if level in PCIE_LEVELS:
        return (1 + PCIE_LEVELS.index(level), 0)
    return (9, 0)


def is_nvlink(level: str) -> bool:
    return bool(NVLINK.match(level))


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str = ""
    uuid: str = ""
    memory_mib: int = 0
    memory_used_mib: int = 0
    pci_bus_id: str = ""
    mig_mode: str = ""  # "Enabled", "Disabled" or "" (not supported / unknown)
    mig_pending: str = ""
    compute_cap: str = ""
    numa: int | None = None
    cpu_affinity: str = ""
    nvlinks: int | None = None  # active NVLink links (nvlink -s or NVML)


@dataclass(frozen=True)
class Port:
    """One port of an RDMA device (/sys/class/infiniband/<dev>/ports/<n>)."""

    device: str
    port: int
    state: str  # ACTIVE, DOWN, INIT, ARMED, ACTIVE_DEFER
    link_layer: str = ""


@dataclass(frozen=True)
class Disk:
    mount: str
    total_kib: int
    avail_kib: int


@dataclass(frozen=True)
class Docker:
    ok: bool
    version: str = ""
    runtimes: tuple[str, ...] = ()
    default_runtime: str = ""
    error: str = ""


@dataclass(frozen=True)
class Missing:
    """Why a fact is absent: not gathered, or the command failed (exit status and message)."""

    name: str
    reason: str


@dataclass(frozen=True)
class HostFacts:
    """What one host told us. None means 'not gathered'; see `missing` for why."""

    name: str
    error: str = ""  # the host could not be reached at all
    hostname: str = ""
    gpu_error: str = ""  # e.g. no NVIDIA driver
    driver: str = ""
    kernel_module: str = ""
    cuda: str = ""
    gpus: tuple[Gpu, ...] | None = None
    links: tuple[tuple[int, int, str], ...] = ()  # (gpu a, gpu b, level), a < b
    p2p_read: tuple[tuple[int, int, str], ...] = ()  # (a, b, OK/CNS/GNS/TNS/NS/U)
    p2p_write: tuple[tuple[int, int, str], ...] = ()
    nics: tuple[str, ...] = ()  # NIC names from the topo -m legend
    rdma_devices: tuple[str, ...] | None = None
    rdma_ports: tuple[Port, ...] = ()
    shm: Disk | None = None
    cache_disk: Disk | None = None
    model_cached_kib: int | None = None
    docker: Docker | None = None
    conda: str | None = None  # version text; "" = gathered but absent
    conda_error: str = ""
    venv: str | None = None  # `python --version` and `vllm: PATH|missing` lines
    # What systemd supervision finds (probe SUPERVISE): `key value` lines pid1, version, uid,
    # user, linger, manager; None when not gathered.
    supervise: str | None = None
    listening: tuple[int, ...] | None = None
    mig_profiles: tuple[str, ...] = ()  # GPU instance profiles (`nvidia-smi mig -lgip`)
    libraries: tuple[tuple[str, bool], ...] | None = None  # (soname, found) on Mooncake hosts
    hami: HamiLibrary | None = None  # phase 3 on hosts: decode.share.library
    # multi-node groups (facts/group.py): "" = no vLLM found; memlock KiB, -1 = unlimited
    vllm_version: str | None = None
    memlock_kib: int | None = None
    memlock_where: str = ""  # where it was measured: a system or user unit, the login shell
    reach: tuple[Reach, ...] = ()  # a node's connect to its group leader
    listen: tuple[Listen, ...] = ()  # the leader's short-lived listener
    # network preflight (facts/transfer.py): interface names; transfers to decode hosts
    net_devices: tuple[str, ...] | None = None
    transfers: tuple[Transfer, ...] = ()
    group_transfers: tuple[Transfer, ...] = ()  # a group leader's host: its all-to-all
    peermem: bool | None = None  # the nvidia_peermem module is loaded (RDMA hosts)
    missing: tuple[Missing, ...] = ()

    def gpu(self, index: int) -> Gpu | None:
        for g in self.gpus or ():
            if g.index == index:
                return g
        return None

    def link(self, a: int, b: int) -> str:
        """Link level between two GPUs ('' when unknown)."""
        lo, hi = min(a, b), max(a, b)
        for x, y, level in self.links:
            if (x, y) == (lo, hi):
                return level
        return ""

    def p2p(self, a: int, b: int, kind: str) -> str:
        table = self.p2p_read if kind == "r" else self.p2p_write
        for x, y, status in table:
            if (x, y) == (a, b):
                return status
        return ""

    def why_missing(self, *names: str) -> str:
        for m in self.missing:
            if m.name in names:
                return m.reason
        return "not gathered"


@dataclass(frozen=True)
class HamiDevice:
    """One GPU as HAMi's device plugin registered it (`hami.io/node-nvidia-register`)."""

    id: str
    index: int = 0
    count: int = 0
    devmem: int = 0  # MiB
    devcore: int = 0
    type: str = ""
    numa: int = 0
    mode: str = ""
    health: bool = False


@dataclass(frozen=True)
class Node:
    name: str
    ready: bool = False
    unschedulable: bool = False
    allocatable_gpus: int = 0
    capacity_gpus: int = 0
    product: str = ""
    gpu_memory_mib: int = 0
    gpu_count_label: int = 0
    driver: str = ""
    mig_strategy: str = ""
    mig_resources: tuple[tuple[str, int], ...] = ()
    hami_devices: tuple[HamiDevice, ...] | None = None  # None: no register annotation
    hami_error: str = ""
    hami_format: str = ""  # "json" (HAMi >= 2.8 device plugin) or "list" (older), "" none


@dataclass(frozen=True)
class ClusterWorkload:
    kind: str  # Deployment, DaemonSet
    namespace: str
    name: str
    component: str
    desired: int
    ready: int
    version: str = ""  # HAMi's version (app.kubernetes.io/version, chart or image tag)
    scheduler_name: str = ""  # hami-scheduler: its kube-scheduler's --scheduler-name


@dataclass(frozen=True)
class Crd:
    name: str  # plural.group
    group: str
    kind: str


@dataclass(frozen=True)
class ClusterFacts:
    nodes: tuple[Node, ...] = ()
    workloads: tuple[ClusterWorkload, ...] | None = None
    crds: tuple[Crd, ...] | None = None
    error: str = ""
    missing: tuple[Missing, ...] = ()


@dataclass(frozen=True)
class Facts:
    hosts: tuple[HostFacts, ...] = ()
    cluster: ClusterFacts | None = None
    notes: tuple[str, ...] = field(default=())

    def host(self, name: str) -> HostFacts | None:
        for h in self.hosts:
            if h.name == name:
                return h
        return None
