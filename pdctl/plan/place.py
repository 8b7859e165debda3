"""Placement of engine instances on hosts: disjoint GPUs and ports, deterministic."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pdctl.errors import SpecError
from pdctl.spec.model import Host, Spec

# Picks `count` GPUs for one instance from the free GPUs of a host (listed order by default;
# topology-aware choosers come from preflight facts).
Chooser = Callable[[Host, Sequence[int], int], tuple[int, ...]]


def first_free(host: Host, free: Sequence[int], count: int) -> tuple[int, ...]:
    return tuple(free[:count])


@dataclass(frozen=True)
class Group:
    """`replicas` instances of one role, each needing `gpus` GPUs, ports from `base_port`."""

    role: str
    replicas: int
    gpus: int
    base_port: int
    path: str


@dataclass(frozen=True)
class Slot:
    role: str
    index: int
    host: Host
    gpus: tuple[int, ...]
    port: int


def place(spec: Spec, groups: Sequence[Group], choose: Chooser = first_free) -> list[Slot]:
    """Fill hosts in spec order, group by group. SpecError names the host or field at fault."""
    hosts = spec.hosts
    if not hosts:
        raise SpecError(
            "no hosts: bare-metal phases need at least one host",
            path="hosts",
            fix="add `hosts: [{name: gpu-a, address: 10.0.0.10, gpus: [0]}]`",
        )
    cpu = spec.engine.device == "cpu"
    free = {h.name: list(h.gpus) for h in hosts}
    used_count = {h.name: 0 for h in hosts}
    used_ports: dict[str, dict[int, str]] = {h.name: {} for h in hosts}
    per_role_on_host: dict[tuple[str, str], int] = {}
    _check_hosts(spec, groups, cpu)
    slots: list[Slot] = []
    for group in groups:
        # Within a group a host only ever loses room, so the search resumes where the last
        # one ended: linear in instances + hosts, not their product.
        start = 0
        for index in range(group.replicas):
            start = _pick_host(hosts, start, group, free, used_count, cpu)
            if start == len(hosts):
                raise SpecError(
                    _shortage(spec, groups, group, index, cpu),
                    path=group.path,
                    fix="add hosts or GPUs, lower the replicas, or lower tensorParallel",
                )
            host = hosts[start]
            gpus = () if cpu else choose(host, free[host.name], group.gpus)
            for g in gpus:
                free[host.name].remove(g)
            used_count[host.name] += 1
            k = per_role_on_host.get((host.name, group.role), 0)
            per_role_on_host[(host.name, group.role)] = k + 1
            port = group.base_port + k
            if port > 65535:
                raise SpecError(
                    f"{group.role} instance {k + 1} on host {host.name} would listen on port "
                    f"{port}, above 65535",
                    path=group.path.rsplit(".", 1)[0] + ".port",
                    fix=f"lower the port to at most {65535 - k}",
                )
            clash = used_ports[host.name].get(port)
            if clash:
                raise SpecError(
                    f"port {port} on host {host.name} is taken by {clash} already",
                    path=group.path.rsplit(".", 1)[0] + ".port",
                    fix="give each role a port range of its own",
                )
            used_ports[host.name][port] = f"{group.role}-{index}"
            slots.append(Slot(group.role, index, host, gpus, port))
    return slots


def _check_hosts(spec: Spec, groups: Sequence[Group], cpu: bool) -> None:
    widths = {g.gpus for g in groups}
    for i, host in enumerate(spec.hosts):
        if cpu:
            continue
        if not host.gpus:
            raise SpecError(
                f"host {host.name} lists no GPUs",
                path=f"hosts[{i}].gpus",
                fix="list the GPU indices pdctl may use, e.g. `gpus: [0, 1]` "
                "(or set engine.device: cpu)",
            )
        if len(widths) == 1:
            width = next(iter(widths))
            if len(host.gpus) % width:
                raise SpecError(
                        f"host {host.name} lists {_gpus(len(host.gpus))}, which instances of "
                    f"{_gpus(width)} (tensorParallel x pipelineParallel) cannot divide",
                    path=f"hosts[{i}].gpus",
                    fix=f"list a multiple of {width} GPUs on {host.name}",
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


def _capacity(host: Host, cpu: bool) -> int:
    if host.instances is not None:
        return host.instances
    return 1 if cpu else 1_000_000


def _pick_host(hosts, start: int, group: Group, free, used_count, cpu: bool) -> int:
    """The index of the first host from `start` with room for one more of `group`
    (len(hosts) when none has)."""
    for i in range(start, len(hosts)):
        host = hosts[i]
        if used_count[host.name] >= _capacity(host, cpu):
            continue
        if cpu or len(free[host.name]) >= group.gpus:
            return i
    return len(hosts)


def _shortage(spec: Spec, groups, group: Group, index: int, cpu: bool) -> str:
    if cpu:
        room = sum(_capacity(h, cpu) for h in spec.hosts)
        return (
            f"{group.role} instance {index + 1} of {group.replicas} finds no room: the hosts "
            f"allow {room} instances (hosts[].instances)"
        )
    listed = ", ".join(f"{h.name}: {len(h.gpus)}" for h in spec.hosts)
    total = sum(g.replicas * g.gpus for g in groups)
    return (
        f"{group.role} instance {index + 1} of {group.replicas} needs {group.gpus} free "
        f"{'GPU' if group.gpus == 1 else 'GPUs'} on one host; the plan needs {_gpus(total)} in "
        f"all, hosts list {listed}"
    )


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"
