"""The group guard step (hosts): every node of a multi-node group whose engines run as processes
(conda, venv) runs under pdctl's guard (pdctl/plan/group_guard.py), which stops its node when
another node of the group goes away, so that systemd (or `pdctl up`) restarts the group as one
instead of leaving a half-restarted group that hangs. docs/multinode.md.

Each guarded node takes a guard port: the k-th guarded node of a role's base port (`guardPort`,
default GUARD_PORT) on an address listens on base + k, on that address (the one its peers use,
which is also the engine's VLLM_HOST_IP), so two hosts of one machine never share one.
Groups with a node in a container (`runtime: docker`) are not guarded: their nodes restart by
Docker's restart policy alone (docs/multinode.md says so)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from importlib import resources

from pdctl.errors import SpecError
from pdctl.plan.model import Instance
from pdctl.plan.shape import peer_address
from pdctl.spec.model import Spec

GUARD_PORT = 29700
GUARD_FILE = "guard.py"


def guarded(inst: Instance) -> bool:
    """A leader of a group whose every node runs as a process."""
    nodes = (inst, *inst.workers)
    return bool(inst.workers) and all(
        n.host is not None and n.host.runtime != "docker" for n in nodes
    )


def guard_ports(spec: Spec, instances: Sequence[Instance]) -> tuple[Instance, ...]:
    """The instances with a ("guard", port) extra port on every node of a guarded group."""
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
                path=f"{node.role}.guardPort",
                fix="lower guardPort",
            )
        return replace(node, extra_ports=(*node.extra_ports, ("guard", key[1] + k)))

    out = []
    for inst in instances:
        if guarded(inst):
            inst = replace(take(inst), workers=tuple(take(w) for w in inst.workers))
        out.append(inst)
    return tuple(out)


def guard_port(node: Instance) -> int | None:
    return dict(node.extra_ports).get("guard")


def guard_launch(
    node: Instance, group: Sequence[Instance], command: tuple[str, ...]
) -> tuple[str, ...]:
    """`command` (the engine's) run under the guard, which knows every other node's guard."""
    port = guard_port(node)
    if port is None:
        return command
    peers: list[str] = []
    for other in group:
        if other.name != node.name and other.host is not None:
            peers += ["--peer", f"{other.name}={peer_address(other.host)}:{guard_port(other)}"]
    assert node.host is not None
    here = ("--name", node.name, "--listen", f"{peer_address(node.host)}:{port}")
    return ("python3", GUARD_FILE, *here, *peers, "--", *command)


@cache
def guard_source() -> str:
    return resources.files("pdctl.plan").joinpath("group_guard.py").read_text()
