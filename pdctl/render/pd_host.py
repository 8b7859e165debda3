"""Bare-metal phase 2: per-host engine scripts, the router and mooncake_master, ports.md."""

from __future__ import annotations

from dataclasses import replace

from pdctl.compat import NIXL_PIP
from pdctl.plan.firewall import PortRule, port_rules
from pdctl.plan.model import Instance, Plan
from pdctl.plan.pd import pd_shape
from pdctl.plan.router import Service, services
from pdctl.render.bundle import Artifact
from pdctl.render.host import Unit, engine_unit, header, unit_artifacts
from pdctl.render.template import render_template


def kv_setup(plan: Plan) -> str:
    """Shell that makes sure the engine's environment has the connector's library."""
    dis = pd_shape(plan.spec, plan.phase).dis
    install = plan.spec.engine.device == "cuda"
    if dis.connector == "mooncake":
        pip, module = plan.release.mooncake_pip(plan.spec.engine.device), "mooncake"
    elif dis.connector == "nixl":
        pip, module = NIXL_PIP, "nixl"
    else:
        return ""  # P2pNcclConnector ships inside vLLM
    return render_template(
        "setup-kv.sh.j2", connector=dis.connector, pip=pip, module=module, install=install
    )


def engine_artifacts(plan: Plan, inst: Instance) -> list[Artifact]:
    assert inst.host is not None
    unit = engine_unit(plan, inst)
    extra = kv_setup(plan)
    if extra:
        unit = replace(unit, setup=unit.setup + extra)
    out = unit_artifacts(plan, unit)
    for name, text in inst.files:
        out.append(Artifact(f"hosts/{inst.host.name}/{inst.name}/{name}", text))
    return out


def service_artifacts(plan: Plan, svc: Service) -> list[Artifact]:
    setup = render_template(
        "setup-venv.sh.j2", venv=svc.venv, executable=svc.executable, install=True, pip=svc.pip
    )
    unit = Unit(
        name=svc.name,
        role=svc.role,
        host=svc.host,
        port=svc.port,
        command=("bash", "run.sh"),
        env=(),
        setup=setup,
    )
    run = render_template(
        "service-run.sh.j2",
        header=header(plan, replace(unit, command=svc.command), "process wrapper"),
        unit=svc.name,
        api_key=svc.api_key,
        wait_urls=svc.wait_urls,
        wait_seconds=plan.spec.router.wait_minutes * 60,
        command=svc.command,
    )
    return [
        *unit_artifacts(plan, replace(unit, command=("bash", "run.sh"))),
        Artifact(f"hosts/{svc.host.name}/{svc.name}/run.sh", run, executable=True),
    ]


def ports_doc(plan: Plan, rules: tuple[PortRule, ...], order: list[str]) -> str:
    lines = [
        f"# Ports for {plan.name} (phase {plan.phase}, bare metal)",
        "",
        "Rendered by pdctl; open these between the hosts (and to clients for the router).",
        "",
        "| host | address | port(s) | open to | purpose | spec field |",
        "|---|---|---|---|---|---|",
    ]
    for r in rules:
        lines.append(
            f"| {r.host} | {r.address} | {r.ports} | {r.opened_to} | {r.purpose} | "
            f"{('`' + r.source + '`') if r.source else '-'} |"
        )
    lines += ["", "## Start order", ""]
    lines += [f"{i}. {name}" for i, name in enumerate(order, 1)]
    lines += [
        "",
        "The router's run.sh waits for every engine's /health itself, so the order matters",
        "only for speed; stop in reverse.",
        "",
    ]
    return "\n".join(lines)


def pd_host_artifacts(plan: Plan) -> list[Artifact]:
    rules = port_rules(plan)
    svcs = services(plan)
    masters = [s for s in svcs if s.role == "master"]
    routers = [s for s in svcs if s.role == "router"]
    out: list[Artifact] = []
    order: list[str] = []
    for svc in masters:
        out += service_artifacts(plan, svc)
        order.append(f"{svc.host.name}/{svc.name}")
    for inst in plan.instances:
        out += engine_artifacts(plan, inst)
        assert inst.host is not None
        order.append(f"{inst.host.name}/{inst.name}")
    for svc in routers:
        out += service_artifacts(plan, svc)
        order.append(f"{svc.host.name}/{svc.name}")
    out.append(Artifact("ports.md", ports_doc(plan, rules, order)))
    return out
