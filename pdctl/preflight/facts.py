"""The facts preflight gathers about hosts and clusters: plain frozen data that each topic's
parser fills and its check reads (pdctl/preflight/<topic>.py). Pure, and below the plan, which
reads them too."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field

# What a damaged output can raise in a parser (a replayed recording, a tool printing garbage).
PARSE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError,
                OverflowError, csv.Error)
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


def version_tuple(text: str) -> tuple[int, ...]:
    """A dotted version's numeric parts, for comparing ("550.54.15" -> (550, 54, 15))."""
    return tuple(int(p) for p in text.split(".") if p.isdigit())


@dataclass(frozen=True)
class Reach:
    """One node's TCP connect to its group leader's rendezvous port."""

    group: str
    address: str
    port: int
    result: str  # "connected", an errno name (ECONNREFUSED, ENETUNREACH, ETIMEDOUT), "error: .."
    route: str = ""  # `ip -o route get` line ("" when unknown)

    @property
    def device(self) -> str:
        m = re.search(r"\bdev (\S+)", self.route)
        return m.group(1) if m else ""


@dataclass(frozen=True)
class Listen:
    """The leader's short-lived listener of one group."""

    group: str
    port: int
    accepted: int
    error: str = ""  # why it could not listen (the port taken, ...)


# The hooks that make HAMi-core cap memory: allocation, the memory query vLLM sizes its KV cache
# from, and the entry point CUDA 12+ runtimes resolve every driver call through. A Release build
# (-fvisibility=hidden) exports none of them, and the preload then limits nothing.
HOOKS = ("cuMemAlloc_v2", "cuMemGetInfo_v2", "cuGetProcAddress")
# HAMi-core compiles these hooks only against CUDA < 13 headers (`#if CUDA_VERSION < 13000` in
# src/cuda/context.c and src/libvgpu.c @8f3a89c): the only build-time CUDA mark in its exports.
BEFORE_13 = ("cuCtxCreate_v2", "cuCtxCreate_v3")


@dataclass(frozen=True)
class HamiLibrary:
    path: str
    exists: bool = False
    readable: bool = False
    symbols: tuple[str, ...] | None = None  # defined dynamic function symbols; None: unread
    how: str = ""  # "nm" or "elf" (pdctl read the file)
    error: str = ""  # why the symbols could not be read

    @property
    def missing_hooks(self) -> tuple[str, ...]:
        have = set(self.symbols or ())
        return tuple(h for h in HOOKS if h not in have)

    @property
    def cuda_headers(self) -> str:
        """'<13' or '>=13': the CUDA headers HAMi-core was built with, from its exports; ''
        when its exports say nothing (no hooks at all)."""
        if not self.symbols or self.missing_hooks:
            return ""
        return "<13" if any(s in self.symbols for s in BEFORE_13) else ">=13"


@dataclass(frozen=True)
class Transfer:
    """One measured (or failed, or skipped) transfer from a prefill host to a decode host."""

    decode: str  # the decode host's name
    transport: str = ""  # tcp, nixl, mooncake, nccl
    address: str = ""  # the decode side's address and port the sender used
    port: int = 0
    bytes: int = 0
    seconds: float = 0.0
    gbps: float | None = None  # None: nothing measured
    latency_us: float | None = None
    verified: bool = False  # the listener saw the sender's bytes in its buffer
    memory: str = ""  # Mooncake: which memory each side registered, "GPU (cuda:0) -> host"
    batch: int = 0  # Mooncake: descriptors of the one batch that went through (a step's pull)
    side: str = ""  # which agent failed first: listen or send ("" when none)
    stage: str = ""  # where: import, bind, connect, accept, register, metadata, transfer, ...
    errno: str = ""
    message: str = ""
    skipped: str = ""  # why no transfer was tried (a missing interface, --no-transfer)
    connected: bool = False  # the sender reached the decode side's side channel
    phase: str = ""  # what the sender was doing last (its last `phase` line)
    listen_phase: str = ""  # and the listener
    logs: tuple[str, ...] = ()  # the agents' stderr (UCX, NCCL, Mooncake messages)

    @property
    def reached(self) -> bool:
        return self.gbps is not None and not self.stage and not self.skipped


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
    mem_available_kib: int | None = None  # /proc/meminfo MemAvailable (engine.kvOffload only)
    hami: HamiLibrary | None = None  # phase 3 on hosts: decode.share.library
    # multi-node groups (group.py): "" = no vLLM found; memlock KiB, -1 = unlimited
    vllm_version: str | None = None
    memlock_kib: int | None = None
    memlock_where: str = ""  # where it was measured: a system or user unit, the login shell
    reach: tuple[Reach, ...] = ()  # a node's connect to its group leader
    listen: tuple[Listen, ...] = ()  # the leader's short-lived listener
    # network preflight (transfer.py): interface names; transfers to decode hosts
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


CLUSTER = "_kubernetes"  # a recording's folder of the cluster's outputs
SSH = "ssh.err"  # a host's file in a recording when it could not be reached


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
