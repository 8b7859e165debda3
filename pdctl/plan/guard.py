"""The group guard step (hosts): every node of a multi-node group runs under pdctl's guard
(pdctl/hostside/group_guard.py), which stops its node when another node of the group goes away, so
that systemd, Docker's restart policy (or `pdctl up`) restarts the group as one instead of
leaving a half-restarted group that hangs. docs/multinode.md.

Each guarded node takes a guard port: the k-th guarded node of a role's base port (`guardPort`,
default GUARD_PORT) on an address listens on base + k, on that address (the one its peers use,
which is also the engine's VLLM_HOST_IP), so two hosts of one machine never share one.
In a container (`runtime: docker`, whose group nodes run on the host's network) the guard runs
as the container's entrypoint with the image's `python3`, from the unit folder the container
mounts at UNIT_MOUNT; as Docker restarts a container at once, the guard of a restarted container
first waits RESTART_DELAY seconds (as systemd's RestartSec), so that its peers see it gone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pdctl.errors import SpecError
from pdctl.hostside import source
from pdctl.plan.model import Instance
from pdctl.plan.shape import peer_address
from pdctl.spec.model import Spec

GUARD_PORT = 29700
GUARD_FILE = "guard.py"
UNIT_MOUNT = "/pdctl/unit"  # where a container sees its unit folder (render/container.py)
RESTART_DELAY = 10  # a restarted container's guard waits this long (systemd: RestartSec)


def guard_ports(spec: Spec, instances: Sequence[Instance]) -> tuple[Instance, ...]:
    """The instances with a ("guard", port) extra port on every node of a multi-node group."""
    taken: dict[tuple[str, int], int] = {}

    def take(node: Instance) -> Instance:
        assert node.host is not None
        section = getattr(spec, node.role)
        key = (peer_address(node.host), section.guard_port or GUARD_PORT)
        k = taken.get(key, 0)
        taken[key] = k + 1
        if key[1] + k > 65535:
            raise SpecError(
                f"the group guard of {node.name} would listen on port {key[1] + k} of {key[0]}",
                path=f"{node.role}.guardPort", fix="lower guardPort",
            )
        return replace(node, extra_ports=(*node.extra_ports, ("guard", key[1] + k)))

    out = []
    for inst in instances:
        if inst.workers:  # a group's leader
            inst = replace(take(inst), workers=tuple(take(w) for w in inst.workers))
        out.append(inst)
    return tuple(out)


def guard_port(node: Instance) -> int | None:
    return dict(node.extra_ports).get("guard")


def guard_args(node: Instance, group: Sequence[Instance]) -> tuple[str, ...]:
    """The guard's options for `node`: its name, where it listens, every other node's guard."""
    assert node.host is not None
    out = ["--name", node.name, "--listen", f"{peer_address(node.host)}:{guard_port(node)}"]
    for other in group:
        if other.name != node.name and other.host is not None:
            out += ["--peer", f"{other.name}={peer_address(other.host)}:{guard_port(other)}"]
    return tuple(out)


def guard_launch(
    node: Instance, group: Sequence[Instance], command: tuple[str, ...]
) -> tuple[str, ...]:
    """`command` (the engine's) run under the guard, as a process started in the unit folder."""
    if guard_port(node) is None:
        return command
    return ("python3", GUARD_FILE, *guard_args(node, group), "--", *command)


def container_launch(
    node: Instance, group: Sequence[Instance], args: tuple[str, ...]
) -> tuple[str, tuple[str, ...]]:
    """(entrypoint, command) of a container node: `vllm serve ARGS` under the guard, or the
    image's own entrypoint (`vllm serve`) with ARGS when the node is not guarded."""
    if guard_port(node) is None:
        return "", args
    delay = ("--restart-delay", str(RESTART_DELAY))
    guard = (f"{UNIT_MOUNT}/{GUARD_FILE}", *guard_args(node, group), *delay)
    return "python3", (*guard, "--", "vllm", "serve", *args)


def guard_source() -> str:
    return source("group_guard.py")
