"""The plan: every decision made, as plain frozen data that render only formats."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pdctl.compat import Release
from pdctl.spec.model import Host, Spec

Role = Literal["serve", "prefill", "decode"]
Target = Literal["hosts", "kubernetes"]


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


@dataclass(frozen=True)
class Plan:
    spec: Spec
    phase: int
    target: Target
    release: Release
    image: str
    instances: tuple[Instance, ...]
    secrets: tuple[SecretEnv, ...] = ()
    served_name: str = ""
    notes: tuple[str, ...] = field(default=())  # warnings: planned, but not what it says

    @property
    def name(self) -> str:
        return self.spec.name

    def hosts_used(self) -> tuple[Host, ...]:
        seen: dict[str, Host] = {}
        for inst in self.instances:
            if inst.host is not None:
                seen.setdefault(inst.host.name, inst.host)
        return tuple(seen.values())

    def labels(self, component: str) -> dict[str, str]:
        return {
            "app.kubernetes.io/name": "vllm",
            "app.kubernetes.io/instance": self.spec.name,
            "app.kubernetes.io/component": component,
            "app.kubernetes.io/managed-by": "pdctl",
        }
