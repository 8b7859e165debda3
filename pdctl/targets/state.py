"""What should run (from the bundle) vs what runs (observed): the change plan. Pure."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Literal

from pdctl.plan.model import Plan
from pdctl.render.bundle import Artifact, Bundle
from pdctl.spec.model import Host

Action = Literal["start", "restart", "keep", "stop"]
WHAT = re.compile(r": (?:process|container) (\S+) \(([^)]+)\) on host (\S+)\.")
ENGINE_ROLES = ("serve", "prefill", "decode")
# Start order: stores first, then engines, then the router in front of them.
ORDER = {"master": 0, "mooncake-master": 0, "serve": 1, "prefill": 1, "decode": 1, "router": 2}


@dataclass(frozen=True)
class Desired:
    """One unit the bundle says should run on a host."""

    host: Host
    name: str
    role: str
    hash: str
    port: int | None
    files: tuple[Artifact, ...] = field(default=(), repr=False)
    # Where a process on the unit's own host reaches its port (the router binds router.listen).
    address: str = "127.0.0.1"

    @property
    def stage(self) -> int:
        return ORDER.get(self.role, 1)

    @property
    def health_path(self) -> str | None:
        if self.port is None:
            return None
        # vllm-router's own /health reflects cached worker state; /liveness is its own.
        return "/liveness" if self.role == "router" else "/health"


@dataclass(frozen=True)
class Observed:
    """One unit found in the deployment folder on a host."""

    host: str
    name: str
    hash: str
    running: bool
    pid: str = "-"


@dataclass(frozen=True)
class Change:
    host: str
    unit: str
    role: str
    action: Action
    why: str


def desired_units(plan: Plan, bundle: Bundle) -> list[Desired]:
    """Units from a hosts bundle (`hosts/<host>/<unit>/start.sh`), with ports from the plan."""
    hosts = {h.name: h for h in plan.spec.hosts}
    ports = {inst.name: inst.port for inst in plan.instances}
    groups: dict[tuple[str, str], list[Artifact]] = {}
    for artifact in bundle:
        parts = artifact.path.split("/")
        if len(parts) >= 4 and parts[0] == "hosts":
            groups.setdefault((parts[1], parts[2]), []).append(artifact)
    out = []
    for (host_name, unit), files in groups.items():
        start = next((a for a in files if a.path.endswith("/start.sh")), None)
        if start is None:
            continue
        what = WHAT.search(start.text)
        role = what.group(2) if what else "serve"
        port = ports.get(unit)
        address = "127.0.0.1"
        if role == "router":
            from pdctl.plan.router import local_address, router_listen

            port = port if port is not None else plan.spec.router.port
            address = local_address(router_listen(plan))
        out.append(
            Desired(
                host=hosts[host_name],
                name=unit,
                role=role,
                hash=script_digest(start.text),
                port=port,
                files=tuple(files),
                address=address,
            )
        )
    return sorted(out, key=lambda d: (d.stage, d.host.name, d.name))


def script_digest(text: str) -> str:
    """The start script's digest: any rendered difference (args, env, setup) is a change."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def host_files(bundle: Bundle, host: str) -> list[Artifact]:
    """Files of a host that belong to no unit (`hosts/<host>/<file>`)."""
    return [a for a in bundle if a.path.startswith(f"hosts/{host}/") and a.path.count("/") == 2]


def diff(desired: list[Desired], observed: list[Observed]) -> list[Change]:
    """The changes that turn `observed` into `desired`, in start order; removals last."""
    seen = {(o.host, o.name): o for o in observed}
    wanted = {(d.host.name, d.name) for d in desired}
    changes = []
    for d in desired:
        o = seen.get((d.host.name, d.name))
        if o is None:
            changes.append(Change(d.host.name, d.name, d.role, "start", "new"))
        elif o.hash != d.hash:
            changes.append(Change(d.host.name, d.name, d.role, "restart", "spec changed"))
        elif not o.running:
            changes.append(Change(d.host.name, d.name, d.role, "start", "not running"))
        else:
            changes.append(Change(d.host.name, d.name, d.role, "keep", "unchanged, running"))
    for o in observed:
        if (o.host, o.name) not in wanted:
            changes.append(Change(o.host, o.name, "-", "stop", "no longer in the spec"))
    return changes


def parse_observed(host: str, text: str) -> list[Observed]:
    """Lines `unit<TAB>hash<TAB>running|stopped<TAB>pid` from the observe script."""
    out = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 4:
            continue
        name, digest, state, pid = parts
        out.append(Observed(host, name, "" if digest == "-" else digest, state == "running", pid))
    return out
