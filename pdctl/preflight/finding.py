"""A preflight finding: one verdict about one host, node or instance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pdctl.plan.model import Instance, Plan
from pdctl.preflight.facts import Facts, HostFacts
from pdctl.spec.model import Host

Status = Literal["PASS", "WARN", "FAIL"]
ORDER = {"PASS": 0, "WARN": 1, "FAIL": 2}


@dataclass(frozen=True)
class Finding:
    status: Status
    check: str  # short id, e.g. "gpu.count", "tp.nvlink"
    where: str  # host, node, instance or "cluster"
    found: str
    expected: str
    fix: str = ""


def worst(findings: tuple[Finding, ...] | list[Finding]) -> Status:
    if not findings:
        return "PASS"
    return max((f.status for f in findings), key=lambda s: ORDER[s])


def gib(kib_or_bytes: int, unit: str = "KiB") -> str:
    """A size for people: KiB or bytes -> '12.3 GiB'."""
    value = kib_or_bytes / (1024**2 if unit == "KiB" else 1024**3)
    return f"{value:.1f} GiB"


def gpu_list(gpus: tuple[int, ...] | list[int]) -> str:
    return ",".join(str(g) for g in gpus)


@dataclass(frozen=True)
class HostCheck:
    """What a topic's per-host check reads: the plan, one host, its facts and instances."""

    plan: Plan
    host: Host
    facts: HostFacts
    instances: list[Instance]
    index: int  # the host's place in spec.hosts, for the fixes' field paths
    weights: int | None  # the model's weights (bytes) when known


@dataclass(frozen=True)
class PlanCheck:
    """What a topic's check over the whole plan reads."""

    plan: Plan
    facts: Facts
    model: Any  # capacity's model (None: unknown, `why` says why)
    why: str
    transfer: bool  # whether the network preflight ran
