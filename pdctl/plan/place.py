"""Placement of engine instances on hosts: disjoint GPUs and ports, deterministic.

Rules (docs/placement.md): a role's `hosts` pins it to those hosts; `hosts[].instances` caps a
host; within them instances SPREAD: each goes to the host with the most free GPUs (then the
fewest instances, then spec order), widest groups first. When spreading leaves an instance no
room, hosts are filled in spec order instead (packing), so a shape that fits at all is placed.
GPUs inside the chosen host come from `choose` (listed order, or topology from facts); facts
never move an instance to another host, so status/down/logs find the same units without them.

Hook point for multi-node groups (plan/group.py): a group spanning hosts is placed node by
node through `place` with one Group per node width; `place`, `Group`, `Slot`, `Chooser` and
`first_free` keep their signatures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from pdctl.errors import SpecError
from pdctl.plan.model import Plan
from pdctl.spec.model import Host, Spec

# Picks `count` GPUs for one instance from the free GPUs of a host (listed order by default;
# topology-aware choosers come from preflight facts).
Chooser = Callable[[Host, Sequence[int], int], tuple[int, ...]]


def first_free(host: Host, free: Sequence[int], count: int) -> tuple[int, ...]:
    return tuple(free[:count])


@dataclass(frozen=True)
class Group:
    """`replicas` instances of one role, each needing `gpus` GPUs, ports from `base_port`;
    `pins`: the only hosts it may use (the role's `hosts`, empty: any)."""

    role: str
    replicas: int
    gpus: int
    base_port: int
    path: str
    pins: tuple[str, ...] = ()

    @property
    def section(self) -> str:
        """The spec section of the group ('decode' for path 'decode.replicas')."""
        return self.path.rsplit(".", 1)[0]


@dataclass(frozen=True)
class Slot:
    role: str
    index: int
    host: Host
    gpus: tuple[int, ...]
    port: int


@dataclass
class _State:
    free: dict[str, list[int]]
    count: dict[str, int]
    ports: dict[str, dict[int, str]]
    per_role: dict[tuple[str, str], int] = field(default_factory=dict)


class _NoRoom(Exception):
    def __init__(self, group: Group, index: int, state: _State) -> None:
        self.group, self.index, self.state = group, index, state


def place(spec: Spec, groups: Sequence[Group], choose: Chooser = first_free) -> list[Slot]:
    """Spread the groups' instances over the hosts (see the module doc). SpecError names the
    constraint that bound: a pin, a host's `instances`, its GPUs, or the replicas."""
    if not spec.hosts:
        raise SpecError(
            "no hosts: bare-metal phases need at least one host", path="hosts",
            fix="add `hosts: [{name: gpu-a, address: 192.0.2.10, gpus: [0]}]`",
        )
    cpu = spec.engine.device == "cpu"
    groups = [g if g.pins else replace(g, pins=role_pins(spec, g.section)) for g in groups]
    _check_pins(spec, groups)
    _check_hosts(spec, groups, cpu)
    try:
        return _fill(spec, groups, choose, cpu, spread=True)
    except _NoRoom:
        pass
    try:
        return _fill(spec, groups, choose, cpu, spread=False)
    except _NoRoom as exc:
        raise _shortage(spec, groups, exc, cpu) from None


def _fill(
    spec: Spec, groups: Sequence[Group], choose: Chooser, cpu: bool, spread: bool
) -> list[Slot]:
    hosts = spec.hosts
    rank = {h.name: i for i, h in enumerate(hosts)}
    st = _State(
        free={h.name: list(h.gpus) for h in hosts}, count={h.name: 0 for h in hosts},
        ports={h.name: {} for h in hosts},
    )
    # Widest first (stable): spreading narrow instances first can leave no host a wide one fits.
    order = sorted(groups, key=lambda g: -g.gpus) if spread else list(groups)
    slots: list[Slot] = []
    for group in order:
        for index in range(group.replicas):
            fit = [h for h in _allowed(hosts, group) if _room(h, group, st, cpu)]
            if not fit:
                raise _NoRoom(group, index, st)
            if spread:
                host = min(
                    fit, key=lambda h: (-len(st.free[h.name]), st.count[h.name], rank[h.name])
                )
            else:
                host = fit[0]
            slots.append(_take(host, group, index, st, choose, cpu))
    position = {g.role: i for i, g in enumerate(groups)}
    return sorted(slots, key=lambda s: (position[s.role], s.index))


def _take(host: Host, group: Group, index: int, st: _State, choose: Chooser, cpu: bool) -> Slot:
    gpus = () if cpu else choose(host, st.free[host.name], group.gpus)
    for g in gpus:
        st.free[host.name].remove(g)
    st.count[host.name] += 1
    k = st.per_role.get((host.name, group.role), 0)
    st.per_role[(host.name, group.role)] = k + 1
    port = group.base_port + k
    if port > 65535:
        raise SpecError(
            f"{group.role} instance {k + 1} on host {host.name} would listen on port "
            f"{port}, above 65535",
            path=f"{group.section}.port", fix=f"lower the port to at most {65535 - k}",
        )
    clash = st.ports[host.name].get(port)
    if clash:
        raise SpecError(
            f"port {port} on host {host.name} is taken by {clash} already",
            path=f"{group.section}.port", fix="give each role a port range of its own",
        )
    st.ports[host.name][port] = f"{group.role}-{index}"
    return Slot(group.role, index, host, gpus, port)


def role_pins(spec: Spec, section: str) -> tuple[str, ...]:
    """The spec's `<section>.hosts` (serve, prefill, decode): the hosts a role is pinned to."""
    role = getattr(spec, section, None)
    return tuple(getattr(role, "hosts", ()) or ())


def _allowed(hosts: Sequence[Host], group: Group) -> list[Host]:
    return [h for h in hosts if not group.pins or h.name in group.pins]


def _room(host: Host, group: Group, st: _State, cpu: bool) -> bool:
    if st.count[host.name] >= _capacity(host, cpu):
        return False
    return cpu or len(st.free[host.name]) >= group.gpus


def _capacity(host: Host, cpu: bool) -> int:
    if host.instances is not None:
        return host.instances
    return 1 if cpu else 1_000_000


def _check_pins(spec: Spec, groups: Sequence[Group]) -> None:
    names = [h.name for h in spec.hosts]
    for group in groups:
        for i, pin in enumerate(group.pins):
            if pin not in names:
                raise SpecError(
                    f"no host named {pin!r} (hosts: {', '.join(names)})",
                    path=f"{group.section}.hosts[{i}]",
                    fix="name a host of `hosts`, or drop the pin",
                )


def _check_hosts(spec: Spec, groups: Sequence[Group], cpu: bool) -> None:
    for i, host in enumerate(spec.hosts):
        # Only the widths of the groups that may use the host (pins keep the others away).
        widths = {g.gpus for g in groups if not g.pins or host.name in g.pins}
        if cpu or not widths:
            continue
        if not host.gpus:
            raise SpecError(
                f"host {host.name} lists no GPUs", path=f"hosts[{i}].gpus",
                fix="list the GPU indices pdctl may use, e.g. `gpus: [0, 1]` "
                "(or set engine.device: cpu)",
            )
        if len(widths) == 1:
            width = next(iter(widths))
            if len(host.gpus) % width:
                raise SpecError(
                    f"host {host.name} lists {_gpus(len(host.gpus))}, which instances of "
                    f"{_gpus(width)} (tensorParallel x pipelineParallel) cannot divide",
                    path=f"hosts[{i}].gpus", fix=f"list a multiple of {width} GPUs on {host.name}",
                )
        if host.instances is not None:
            need = host.instances * min(widths)
            if need > len(host.gpus):
                raise SpecError(
                    f"host {host.name}: {host.instances} instances of {_gpus(min(widths))} need "
                    f"{_gpus(need)} but it lists {len(host.gpus)}",
                    path=f"hosts[{i}].instances",
                    fix=f"lower instances or list more GPUs on {host.name}",
                )


def _shortage(spec: Spec, groups: Sequence[Group], exc: _NoRoom, cpu: bool) -> SpecError:
    """The error for an instance no host takes, naming what bound it: the role's pin, a
    host's `instances`, or (neither) the GPUs and replicas."""
    group, st = exc.group, exc.state
    allowed = _allowed(spec.hosts, group)
    index = {h.name: i for i, h in enumerate(spec.hosts)}
    capped = [h for h in allowed if st.count[h.name] >= _capacity(h, cpu)]
    why = []
    for h in allowed:
        if h in capped and h.instances is not None:
            why.append(
                f"{h.name} is full at `instances: {h.instances}` (hosts[{index[h.name]}].instances)"
            )
        elif h in capped:
            why.append(f"{h.name} runs 1 CPU instance (set hosts[].instances for more)")
        else:
            why.append(f"{h.name} has {len(st.free[h.name])} of {_gpus(len(h.gpus))} free")
    unit = "GPU" if group.gpus == 1 else "GPUs"
    need = "room" if cpu else f"{group.gpus} free {unit} on one host"
    what = f"{group.role} instance {exc.index + 1} of {group.replicas} needs {need}: "
    what += "; ".join(why)
    if not cpu:
        total = sum(g.replicas * g.gpus for g in groups)
        listed = ", ".join(f"{h.name}: {len(h.gpus)}" for h in spec.hosts)
        what += f" (the plan needs {_gpus(total)} in all, hosts list {listed})"
    if group.pins and len(allowed) < len(spec.hosts):
        others = [h.name for h in spec.hosts if h.name not in group.pins]
        return SpecError(
            what + f"; {group.section}.hosts pins it to {', '.join(group.pins)}",
            path=f"{group.section}.hosts",
            fix=f"add a host to the pin (e.g. {others[0]}), or lower {group.section}.replicas",
        )
    limited = [h for h in capped if h.instances is not None]
    if limited:
        first = limited[0]
        return SpecError(
            what, path=f"hosts[{index[first.name]}].instances",
            fix=f"raise or remove `instances` on {first.name}, or add hosts",
        )
    return SpecError(
        what, path=group.path, fix="add hosts or GPUs, lower the replicas, or lower tensorParallel",
    )


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def where(plan: Plan) -> list[str]:
    """One line per unit on hosts, in start order: `name  on host  GPUs 0,1  port 8100` (what
    `validate` and `up --dry-run` print): every engine process (a group's other nodes too),
    the router and a Mooncake master (GPUs `-`); nothing on Kubernetes, where the scheduler
    places."""
    gpus = {n.name: n.gpus for i in plan.instances for n in (i, *i.workers)}
    rows = [
        (u.name, u.host.name, ",".join(map(str, gpus.get(u.name, ()))) or "-", str(u.port))
        for u in plan.units
    ]
    if not rows:
        return []
    w = [max(len(r[k]) for r in rows) for k in range(3)]
    return [
        f"{name:<{w[0]}}  on {host:<{w[1]}}  GPUs {gpus:<{w[2]}}  port {port}"
        for name, host, gpus, port in rows
    ]
