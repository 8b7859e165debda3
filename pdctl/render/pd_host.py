"""Bare-metal phase 2: per-host engine scripts, the router and mooncake_master, ports.md."""

from __future__ import annotations

import ipaddress
from dataclasses import replace

from pdctl.compat import NIXL_PIP
from pdctl.plan.model import ENGINE_ROLES, Plan, PortRule, Service, Unit
from pdctl.plan.router import LIBRARY_PACKAGES, MASTER_LIBRARIES
from pdctl.render.bundle import Artifact, UnitFiles
from pdctl.render.hami_host import slice_setup
from pdctl.render.host import find_links, header, unit_files, with_setup
from pdctl.render.template import render_template
from pdctl.spec.model import Host
from pdctl.spec.value import host_port


def library_check(what: str, libraries: tuple[str, ...]) -> str:
    """Shell that stops with one line (and the apt/dnf command) when a library is missing."""
    rows = [(lib, *LIBRARY_PACKAGES[lib]) for lib in libraries]
    return render_template("mooncake-libs.sh.j2", what=what, libraries=rows)


def kv_setup(plan: Plan, host: Host, libraries: tuple[str, ...] = ()) -> str:
    """Shell that makes sure the engine's environment has the connector's library."""
    assert plan.shape is not None
    dis = plan.shape.dis
    install = plan.spec.engine.device == "cuda"
    if dis.connector == "mooncake":
        # engine.so needs libcudart, which `import torch` loads first (vLLM imports it so).
        pip = plan.release.mooncake_pip(plan.spec.engine.device)
        check = "import torch; from mooncake.engine import TransferEngine"
    elif dis.connector == "nixl":
        pip, check = NIXL_PIP, "import nixl"
    else:
        return ""  # P2pNcclConnector ships inside vLLM
    return render_template(
        "setup-kv.sh.j2", connector=dis.connector, pip=pip, check=check, install=install,
        find_links=find_links(plan, host),
        libraries=library_check(pip.split("==")[0], libraries) if libraries else "",
    )


def engine_files(plan: Plan, unit: Unit) -> UnitFiles:
    if unit.image is not None:
        # A container: its image carries the connector (nothing is installed on the host);
        # docker-start.sh has the HAMi-core checks (render.host.unit_files).
        return unit_files(plan, unit)
    unit = with_setup(plan, unit)
    extra = kv_setup(plan, unit.host, plan.libraries_on(unit.host.name)) + slice_setup(unit)
    if extra:
        unit = replace(unit, setup=unit.setup + extra)
    return unit_files(plan, unit)


def service_files(plan: Plan, planned: Unit) -> UnitFiles:
    svc = next(s for s in plan.services if s.name == planned.name)
    setup = render_template(
        "setup-venv.sh.j2", venv=svc.venv, executable=svc.executable, install=True, pip=svc.pip,
        find_links=find_links(plan, svc.host),
    )
    if svc.role == "master":
        setup = library_check(svc.executable, MASTER_LIBRARIES) + setup
    unit = replace(planned, command=("bash", "run.sh"), setup=setup)
    run = render_template(
        "service-run.sh.j2",
        header=header(plan, replace(unit, command=svc.command), "process wrapper"), unit=svc.name,
        api_key=svc.api_key, wait_urls=svc.wait_urls,
        wait_seconds=plan.spec.router.wait_minutes * 60, command=svc.command,
    )
    wrapper = Artifact(f"hosts/{svc.host.name}/{svc.name}/run.sh", run, executable=True)
    # the digest covers the wrapped command (the router's --worker-urls): a changed replica
    # count restarts the router on `up`, which "bash run.sh" alone never would
    return unit_files(plan, unit, (wrapper,), hashed=replace(unit, command=svc.command))


def access_doc(plan: Plan, svcs: tuple[Service, ...]) -> list[str]:
    """Who can use the router, said plainly: vllm-router 0.1.17 checks no client."""
    router = next(s for s in svcs if s.role == "router")
    where = host_port(router.address, plan.spec.router.port)
    lines = [
        "## Who can reach the router", "",
        f"vllm-router listens on {where} (`router.listen`; Prometheus metrics on port "
        f"{plan.spec.router.metrics_port} of the same address).",
    ]
    if plan.shape is None:  # phase 0: plain mode
        lines += [
            "vllm-router 0.1.17 has no client authentication; in plain mode it forwards the",
            "client's headers, `Authorization` included, so engines with `secrets.apiKey` check",
            "each client's key themselves.",
        ]
    else:
        lines += [
            "vllm-router 0.1.17 has no client authentication: in PD mode it drops the client's",
            "`Authorization` header and sends its own to the engines.",
        ]
    if plan.spec.secrets.api_key is not None and plan.shape is None:
        lines.append("Here the engines require `secrets.apiKey`: clients send it.")
    elif plan.spec.secrets.api_key is not None:
        lines += [
            "Here the engines require `secrets.apiKey`, and the router sends that key with every",
            f"request: anyone who reaches {where} is authenticated to the engines.",
        ]
    else:
        lines.append(f"Anyone who reaches {where} can use the model.")
    if ipaddress.ip_address(router.address).is_loopback:
        host = router.host
        login = f"{host.user}@{host.address}" if host.user else host.address
        lines.append(
            "It listens on loopback: reach it through an SSH tunnel "
            f"(`ssh -N -L {plan.spec.router.port}:{where} {login}`) or a "
            "proxy on the host."
        )
    else:
        lines.append(
            "Open its port only to trusted clients, or set `router.listen: "
            "127.0.0.1` and put an authenticating proxy in front."
        )
    guard = "check the key themselves" if plan.spec.secrets.api_key else "check no key"
    lines += [
        "", f"The engines listen on every address (`--host 0.0.0.0`) and {guard}:",
        "open their ports to the router and engine hosts only (the table above).",
    ]
    if any(s.role == "master" for s in svcs):
        lines += [
            "", "mooncake_master has no authentication either; mooncake 0.3.13.post1 binds its",
            "HTTP metadata server on every address whatever `--http_metadata_server_host`",
            "says, so keep its ports behind the firewall.",
        ]
    return [*lines, ""]


def ports_doc(
    plan: Plan, rules: tuple[PortRule, ...], order: list[str], svcs: tuple[Service, ...] = ()
) -> str:
    lines = [
        f"# Ports for {plan.name} (phase {plan.phase}, bare metal)", "",
        "Rendered by pdctl; open these between the hosts (and to clients for the router).", "",
        "| host | address | port(s) | open to | purpose | spec field |",
        "|---|---|---|---|---|---|",
    ]
    for r in rules:
        lines.append(
            f"| {r.host} | {r.address} | {r.ports} | {r.opened_to} | {r.purpose} | "
            f"{('`' + r.source + '`') if r.source else '-'} |"
        )
    lines.append("")
    if svcs:
        lines += access_doc(plan, svcs)
    lines += ["## Start order", ""]
    lines += [f"{i}. {name}" for i, name in enumerate(order, 1)]
    if svcs:
        lines += [
            "", "The router's run.sh waits for every engine's /health itself, so the order matters",
            "only for speed; stop in reverse.",
        ]
    else:  # phase 0 with multi-node groups (docs/multinode.md)
        lines += [
            "", "A group's nodes start together; the group is up when its leader's /health",
            "answers. Stop in reverse.",
        ]
    return "\n".join([*lines, ""])


def group_ports_doc(plan: Plan, units: list[UnitFiles]) -> list[Artifact]:
    """Phase 0: ports.md when multi-node groups need ports between hosts or a router is in
    front (plan.ports)."""
    if not plan.ports:
        return []
    order = [f"{u.unit.host.name}/{u.unit.name}" for u in units]
    return [Artifact("ports.md", ports_doc(plan, plan.ports, order, plan.services))]


def pd_host_units(plan: Plan) -> tuple[list[UnitFiles], list[Artifact]]:
    """The units (masters, engines, the router) with their files, and the files of no unit."""
    rules, svcs = plan.ports, plan.services
    units = [
        engine_files(plan, u) if u.role in ENGINE_ROLES else service_files(plan, u)
        for u in plan.units
    ]
    order = [f"{u.unit.host.name}/{u.unit.name}" for u in units]
    return units, [Artifact("ports.md", ports_doc(plan, rules, order, svcs))]
