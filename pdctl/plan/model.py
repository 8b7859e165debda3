"""The plan: every decision made, as plain frozen data that render only formats."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pdctl.compat import Release
from pdctl.plan.shape import PdShape
from pdctl.plan.slice import Slice
from pdctl.spec.kube import PodSettings
from pdctl.spec.model import Host, Spec

Role = Literal["serve", "prefill", "decode"]
TargetName = Literal["hosts", "kubernetes"]
ENGINE_ROLES: tuple[str, ...] = ("serve", "prefill", "decode")
# Start order: stores first, then engines, then the router in front of them.
STAGES = {"master": 0, "mooncake-master": 0, "serve": 1, "prefill": 1, "decode": 1, "router": 2}
# vllm-router's own /health reflects cached worker state; /liveness is its own.
ROUTER_HEALTH = "/liveness"
ROUTER_READY = "/readiness"  # P/D mode: 200 while each role has a healthy worker
STORE_ROLES = ("master", "mooncake-master")
ENGINE_HEALTH = "/health"


@dataclass(frozen=True)
class SecretEnv:
    """A secret exported to engines as `name`, read at `up` time from local env `source`
    (hosts) or from Secret `secret_name`/`secret_key` (Kubernetes)."""

    name: str
    source: str
    secret_name: str
    secret_key: str


@dataclass(frozen=True)
class Instance:
    """One engine process (hosts) or one Deployment's pod template (Kubernetes)."""

    name: str
    role: Role
    index: int
    port: int
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    host: Host | None = None
    gpus: tuple[int, ...] = ()
    gpu_count: int = 0
    tensor_parallel: int = 1
    replicas: int = 1
    extra_ports: tuple[tuple[str, int], ...] = ()
    container_port: int | None = None
    # Files written beside the unit's scripts, (name, text): e.g. Mooncake's mooncake.json.
    files: tuple[tuple[str, str], ...] = ()
    # A multi-node group (plan/group.py): the leader holds its other nodes in `workers`; a
    # worker names its leader in `leader` (it runs `--headless`: no API, no health probe).
    workers: tuple[Instance, ...] = ()
    leader: str = ""
    # Kubernetes (LeaderWorkerSet pods): the container command that wraps `vllm serve` and
    # adds the rank flags from the LWS_* variables; empty: `vllm serve` itself.
    launch: tuple[str, ...] = ()
    # The engine's --max-num-seqs (the role's maxNumSeqs, else an extraArgs one); None: vLLM's
    # default. `pdctl top` reads it to tell a full batch.
    max_num_seqs: int | None = None


@dataclass(frozen=True)
class Unit:
    """One process pdctl starts on a host: an engine, the router, a mooncake master. `image`
    set: a container (`gpus` and `publish` are its docker run parameters). `address`: where a
    process on the unit's own host reaches its port (the router binds router.listen)."""

    name: str
    role: str
    host: Host
    port: int
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    setup: str
    image: str | None = None
    gpus: tuple[int, ...] = ()
    publish: tuple[str, ...] = ()
    address: str = "127.0.0.1"
    # Files written beside the unit's scripts, (name, text): e.g. Mooncake's mooncake.json.
    files: tuple[tuple[str, str], ...] = ()
    # A headless node of a multi-node group: the leader unit's name (health is the leader's).
    leader: str = ""
    # A container whose command is not the image's entrypoint (`vllm serve`): what runs it
    # (the group guard's python3, plan/guard.py); `command` is then that program's arguments.
    entrypoint: str = ""

    @property
    def stage(self) -> int:
        """Start order: lower first (stores, engines, the router)."""
        return STAGES.get(self.role, 1)

    @property
    def health_path(self) -> str | None:
        """What `up` and `status` probe on `port`; None: the process only (mooncake_master's
        `port` is its RPC port, its HTTP metrics are elsewhere)."""
        if self.role in STORE_ROLES or self.leader:
            return None
        return ROUTER_HEALTH if self.role == "router" else ENGINE_HEALTH


@dataclass(frozen=True)
class Service:
    """A non-engine process pdctl starts on a host, from its own pinned Python environment."""

    name: str
    role: str  # "router" | "master"
    host: Host
    port: int
    command: tuple[str, ...]
    venv: str
    pip: str
    executable: str
    health: str  # URL that answers 200 on the service host when it is up
    address: str  # where it listens for other hosts or clients (ports.md)
    wait_urls: tuple[str, ...] = ()  # health URLs that must answer before it starts
    api_key: bool = False  # export OPENAI_API_KEY from the engines' VLLM_API_KEY
    local: str = "127.0.0.1"  # where a process on its own host reaches it (router: router.listen)
    files: tuple[tuple[str, str], ...] = ()  # (name, text) written into its unit folder


@dataclass(frozen=True)
class PortRule:
    """One line of the firewall list."""

    host: str
    address: str
    ports: str  # "8100" or "21001-21002"
    opened_to: str  # who connects
    purpose: str
    source: str  # the spec field that sets it ("" for ranges pdctl does not choose)


@dataclass(frozen=True)
class Caution:
    """A spec setting that may not work where it runs, located at its field: printed as a
    warning by validate/render, refused by their --strict (plan/transport.py)."""

    path: str
    message: str
    fix: str


@dataclass(frozen=True)
class Plan:
    spec: Spec
    phase: int
    target: TargetName
    release: Release
    image: str
    instances: tuple[Instance, ...]
    secrets: tuple[SecretEnv, ...] = ()
    served_name: str = ""
    notes: tuple[str, ...] = field(default=())  # warnings: planned, but not what it says
    cautions: tuple[Caution, ...] = ()  # located warnings: a setting may not work where it runs
    # Phases 2 and 3, each decided once by its planning step (make_plan runs them in order):
    shape: PdShape | None = None  # prefill, decode, KV transfer
    services: tuple[Service, ...] = ()  # hosts: mooncake_master, then the router (start order)
    ports: tuple[PortRule, ...] = ()  # hosts: the firewall list, checked for clashes
    libraries: tuple[tuple[str, tuple[str, ...]], ...] = ()  # hosts: (host, Mooncake's libs)
    slice: Slice | None = None  # phase 3: the decode's HAMi slice
    kinds: tuple[tuple[str, str], ...] = ()  # Kubernetes: (group, kind) of custom resources
    gateway_pods: tuple[tuple[str, str], ...] = ()  # networkPolicy: labels of the Gateway's pods
    # Hosts: every process or container pdctl starts, in start order (plan.units).
    units: tuple[Unit, ...] = ()
    # Kubernetes: each pod role's effective settings (section + role override; plan/kube_checks).
    pods: tuple[tuple[str, PodSettings], ...] = ()
    # Hosts: install from the wheels `up --bundle` copies (render.host.wheels_dir), never an index.
    bundled: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def on_kubernetes(self) -> bool:
        """What `up` applies are the bundle's objects on a cluster, not `units` on hosts."""
        return self.target == "kubernetes"

    @property
    def disaggregated(self) -> bool:
        """Prefill and decode run apart (phases 2 and 3)."""
        return self.phase in (2, 3)

    def hosts_used(self) -> tuple[Host, ...]:
        seen: dict[str, Host] = {}
        for inst in self.instances:
            for node in (inst, *inst.workers):  # the headless nodes of a multi-node group
                if node.host is not None:
                    seen.setdefault(node.host.name, node.host)
        return tuple(seen.values())

    def libraries_on(self, host: str) -> tuple[str, ...]:
        return dict(self.libraries).get(host, ())

    def pod(self, role: str) -> PodSettings:
        """The effective pod settings of `serve`, `prefill`, `decode` or `epp`."""
        return dict(self.pods)[role]

    def labels(self, component: str) -> dict[str, str]:
        """The recommended labels; `version` is the vLLM version the deployment runs."""
        return {
            "app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": self.spec.name,
            "app.kubernetes.io/component": component, "app.kubernetes.io/part-of": self.spec.name,
            "app.kubernetes.io/version": self.spec.engine.version,
            "app.kubernetes.io/managed-by": "pdctl",
        }
