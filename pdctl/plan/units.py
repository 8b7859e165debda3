"""The units step: every process or container pdctl starts on a host, as one `Unit` each, in
start order (mooncake_master, the engines, the router). Render adds the setup shell and files."""

from __future__ import annotations

from collections.abc import Sequence

from pdctl.plan.model import ENGINE_ROLES, Instance, Plan, Service, Unit
from pdctl.spec.model import Host


def engine_unit(plan: Plan, inst: Instance, group: Sequence[Instance]) -> Unit:
    """An engine: `vllm serve` as a process, or the image's entrypoint in a container (whose
    GPUs docker gives it: no CUDA_VISIBLE_DEVICES). A container whose instance has a
    `container_port` (phase 0) publishes it on the host's port; one without (prefill/decode,
    multi-node group nodes) runs on the host's network with no port mapping (render.container).
    `group`: the nodes of its group (itself alone when single); a node of a multi-node group
    runs under the group guard (plan/guard.py), which asks the others."""
    from pdctl.plan.guard import (
        GUARD_FILE,
        container_launch,
        guard_launch,
        guard_port,
        guard_source,
    )

    assert inst.host is not None
    host = inst.host
    files = inst.files
    if guard_port(inst) is not None:
        files += ((GUARD_FILE, guard_source()),)
    if host.runtime == "docker":
        entrypoint, command = container_launch(inst, group, inst.args)
        return Unit(
            name=inst.name, role=inst.role, host=host, port=inst.port, command=command,
            entrypoint=entrypoint,
            env=tuple(kv for kv in inst.env if kv[0] != "CUDA_VISIBLE_DEVICES"), setup="",
            image=plan.image, gpus=inst.gpus,
            publish=(f"{inst.port}:{inst.container_port}",) if inst.container_port else (),
            files=files, leader=inst.leader,
        )
    return Unit(
        name=inst.name, role=inst.role, host=host, port=inst.port,
        command=guard_launch(inst, group, ("vllm", "serve", *inst.args)), env=inst.env, setup="",
        files=files, leader=inst.leader,
    )


def service_unit(svc: Service) -> Unit:
    """The router or mooncake_master; its `command` is what its run.sh wrapper runs."""
    return Unit(
        name=svc.name, role=svc.role, host=svc.host, port=svc.port, command=svc.command, env=(),
        setup="", address=svc.local, files=svc.files,
    )


def host_units(plan: Plan) -> tuple[Unit, ...]:
    if plan.on_kubernetes:
        return ()
    masters = [service_unit(s) for s in plan.services if s.role != "router"]
    routers = [service_unit(s) for s in plan.services if s.role == "router"]
    # A multi-node group: the leader, then its headless nodes (started together; the
    # group's health is the leader's /health).
    engines = (
        engine_unit(plan, n, group)
        for group in ((i, *i.workers) for i in plan.instances)
        for n in group
    )
    return (*masters, *engines, *routers)


def process_hosts(plan: Plan) -> tuple[Host, ...]:
    """The hosts that run a unit as a process (engines and services): where start scripts
    install Python packages (`up --bundle` copies the wheels there)."""
    seen: dict[str, Host] = {}
    for unit in plan.units:
        if unit.image is None:
            seen.setdefault(unit.host.name, unit.host)
    return tuple(seen.values())


def engine_hosts(plan: Plan) -> set[str]:
    """The hosts with an engine process (`up --bundle` copies the weights there)."""
    return {u.host.name for u in plan.units if u.role in ENGINE_ROLES and u.image is None}


def container_images(plan: Plan) -> dict[str, tuple[str, ...]]:
    """host name -> the images its containers run."""
    out: dict[str, set[str]] = {}
    for u in plan.units:
        if u.image is not None:
            out.setdefault(u.host.name, set()).add(u.image)
    return {h: tuple(sorted(r)) for h, r in out.items()}
