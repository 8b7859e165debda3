"""What should run (from the bundle) vs what runs (observed): the change plan. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from pdctl.plan.model import ENGINE_HEALTH, ROUTER_HEALTH, ROUTER_READY, STAGES, Plan
from pdctl.plan.router import routes_when_ready
from pdctl.render.bundle import Artifact, Bundle
from pdctl.render.bundle import script_digest as script_digest  # re-exported
from pdctl.spec.model import Host

Action = Literal["start", "restart", "keep", "stop"]
CHANGED_STOPPED = "spec changed, not running"  # the `why` of a start over changed scripts


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
    readiness: bool = False  # a router's /readiness says whether it routes (routes_when_ready)

    @property
    def stage(self) -> int:
        return STAGES.get(self.role, 1)

    @property
    def health_path(self) -> str | None:
        if self.port is None:
            return None
        return ROUTER_HEALTH if self.role == "router" else ENGINE_HEALTH

    @property
    def ready_path(self) -> str | None:
        """What `up` waits on: a P/D router's `/readiness`, which vllm-router 0.1.17 answers
        200 only while it has a healthy worker of each role, so that `up` says ready when
        requests are routed: a kept router marks a restarted engine healthy again only at its
        next check (router.healthCheckIntervalSecs), and answered 503 until then (H100 run,
        2026-12-07). `status` and the repairs keep `health_path` (the router's own liveness)."""
        return ROUTER_READY if self.readiness and self.role == "router" else self.health_path


@dataclass(frozen=True)
class Observed:
    """One unit found in the deployment folder on a host."""

    host: str
    name: str
    hash: str
    running: bool
    pid: str = "-"
    restarts: int = 0  # how often Docker (a container's policy) or systemd restarted it
    state: str = ""  # the observe script's word: running, stopped, auto-restart, failed:<why>
    supervisor: str = ""  # systemd, nohup or docker ('' from an older observe script)
    age: int | None = None  # seconds a running process unit's server has run


@dataclass(frozen=True)
class Change:
    host: str
    unit: str
    role: str
    action: Action
    why: str


def desired_units(plan: Plan, bundle: Bundle) -> list[Desired]:
    """The units of a hosts bundle (its data: no path or script is parsed), in start order."""
    out = [
        Desired(
            host=u.unit.host, name=u.unit.name, role=u.unit.role, hash=u.digest,
            port=u.unit.port if u.unit.health_path else None, files=u.files, address=u.unit.address,
            readiness=routes_when_ready(plan),
        )
        for u in bundle.units
    ]
    return sorted(out, key=lambda d: (d.stage, d.host.name, d.name))


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
        elif o.state == "gone":
            why = f"restart: not answering, its server process (pid {o.pid}) is gone"
            changes.append(Change(d.host.name, d.name, d.role, "restart", why))
        elif not o.running:
            # Nothing runs to replace: a start, of the new scripts when they changed (the old
            # ones are kept in `previous/`, and an undo puts them back without starting them).
            why = CHANGED_STOPPED if o.hash != d.hash else "not running"
            changes.append(Change(d.host.name, d.name, d.role, "start", why))
        elif o.hash != d.hash:
            changes.append(Change(d.host.name, d.name, d.role, "restart", "spec changed"))
        else:
            changes.append(Change(d.host.name, d.name, d.role, "keep", "unchanged, running"))
    for o in observed:
        if (o.host, o.name) not in wanted:
            changes.append(Change(o.host, o.name, "-", "stop", "no longer in the spec"))
    return changes


def group_cause(unit: str, stopped: bool = False) -> str:
    """Why the other nodes of `unit`'s multi-node group restart with it."""
    state = "is not running" if stopped else "restarts"
    return f"restart: {unit} of its multi-node group {state} (one group)"


def whole_groups(changes: list[Change], leaders: Mapping[str, str | None]) -> list[Change]:
    """A multi-node group restarts as one: when a node of a group is not running (or is
    restarted), every other node that would be kept is restarted with it, and a stopped node
    is restarted rather than started alone (a node cannot rejoin a running vLLM group; a
    half-restarted group hangs). `leaders`: unit -> its group's leader (None: its own group).
    A node that is new (never deployed) is started; a group whose nodes all start starts as
    one anyway."""
    group = {c.unit: leaders.get(c.unit) or c.unit for c in changes}
    members: dict[str, list[Change]] = {}
    for c in changes:
        if c.action != "stop":
            members.setdefault(group[c.unit], []).append(c)
    cause: dict[str, str] = {}  # group -> why its kept nodes restart
    for name, nodes in members.items():
        moved = [c for c in nodes if c.action in ("start", "restart") and c.why != "new"]
        if len(nodes) > 1 and moved and any(c.action != "start" for c in nodes):
            first = moved[0]
            cause[name] = group_cause(first.unit, first.action == "start")
    out = []
    for c in changes:
        why = cause.get(group[c.unit]) if c.action != "stop" else None
        if why and c.action == "keep":
            out.append(Change(c.host, c.unit, c.role, "restart", why))
        elif why and c.action == "start" and c.why != "new":
            out.append(Change(c.host, c.unit, c.role, "restart", c.why))
        else:
            out.append(c)
    return out


def parse_observed(host: str, text: str) -> list[Observed]:
    """Lines `unit<TAB>hash<TAB>state<TAB>pid<TAB>restarts[<TAB>supervisor<TAB>age]` from the
    observe script (restarts: Docker's or systemd's restart count, `-` for a nohup'd process)."""
    out = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) not in (5, 6, 7):
            continue
        name, digest, state, pid, count = parts[:5]
        restarts = int(count) if count.isdigit() else 0
        how = parts[5] if len(parts) >= 6 else ""
        age = int(parts[6]) if len(parts) == 7 and parts[6].isdigit() else None
        running = state == "running"
        digest = "" if digest == "-" else digest
        out.append(Observed(host, name, digest, running, pid, restarts, state, how, age))
    return out


# A server that has run this long (up's default --timeout) and does not answer its health
# probe is broken, not starting: `status` says `not answering` and `up` restarts it.
START_GRACE = 900


def overdue(o: Observed | None, grace: float = START_GRACE) -> bool:
    """Running past `grace` seconds: a failed health probe means not answering."""
    return o is not None and o.running and o.age is not None and o.age > grace


def not_answering(c: Change, detail: str, o: Observed) -> Change:
    """The restart `up` plans for a kept unit whose server does not answer past the grace."""
    age = o.age or 0
    since = f"{age // 60} min" if age >= 120 else f"{age} s"
    why = f"restart: not answering ({detail}) after {since} running"
    return Change(c.host, c.unit, c.role, "restart", why)


ASKED = "restart: asked (pdctl restart)"


def asked_restarts(changes: list[Change], asked: frozenset[str]) -> list[Change]:
    """`pdctl restart`: the kept units it names restart with the scripts they run (then
    whole_groups takes the rest of a group with them)."""
    return [
        Change(c.host, c.unit, c.role, "restart", ASKED)
        if c.unit in asked and c.action == "keep" else c
        for c in changes
    ]


def fresh_router(changes: list[Change], mooncake: bool) -> list[Change]:
    """With Mooncake, a router that would be kept restarts after a prefill that starts or
    restarts (its stage comes after the engines'): vllm-router reads each prefill's Mooncake
    engine id once, at its own start, and vLLM takes a new one at every start, so the kept
    router would send decode after the KV of an engine that is gone (plan/router.watched)."""
    moved = [c for c in changes if c.role == "prefill" and c.action in ("start", "restart")]
    if not mooncake or not moved:
        return changes
    first = moved[0]
    how = "starts" if first.action == "start" else "restarts"
    why = (f"restart: {first.unit} {how}, and vllm-router reads a prefill's Mooncake engine "
           "id only at its own start")
    return [Change(c.host, c.unit, c.role, "restart", why)
            if c.role == "router" and c.action == "keep" else c for c in changes]


def supervision(o: Observed) -> str:
    """What `status` adds to a systemd unit's state that is not running: between restarts, or
    stopped at its start limit."""
    if o.state == "gone":
        return " (its server process is gone; `pdctl up` restarts it)"
    words = {"auto-restart": "restarting", "failed:start-limit-hit": "start limit hit"}
    if o.supervisor == "systemd" and not o.running and o.state not in ("stopped", ""):
        return f" ({words.get(o.state, o.state.replace(':', ': '))})"
    return ""


def restarted(count: int) -> str:
    """What `status` adds to a unit's state after Docker or systemd restarted it."""
    return f" (restarted {count} time{'' if count == 1 else 's'})" if count else ""
