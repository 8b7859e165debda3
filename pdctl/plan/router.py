"""The processes besides the engines on bare metal: the request router (the paper's
"Conductor" role) and, for the Mooncake shared store, mooncake_master. Stage 3 of a phase 2
plan on hosts (after the shape and the engines' placement); pure."""

from __future__ import annotations

import ipaddress

from pdctl.compat import MOONCAKE_PACKAGE, MOONCAKE_VERSION
from pdctl.errors import SpecError
from pdctl.hostside import source
from pdctl.plan.model import Instance, Plan, Service
from pdctl.plan.shape import master_host, peer_address, router_host
from pdctl.spec.model import Host, Spec
from pdctl.spec.value import host_port

# System libraries the mooncake-transfer-engine 0.3.13.post1 wheels load (ELF NEEDED entries),
# even for protocol tcp, and the packages that ship them: Debian/Ubuntu (apt; `curl` pulls
# libcurl4, named libcurl4t64 from Ubuntu 24.04 on) and RHEL/Fedora (dnf).
LIBRARY_PACKAGES = {
    "libibverbs.so.1": ("libibverbs1", "libibverbs"), "libnuma.so.1": ("libnuma1", "numactl-libs"),
    "libcurl.so.4": ("curl", "libcurl"), "libmlx5.so.1": ("ibverbs-providers", "libibverbs"),
}
# mooncake_master of the non-CUDA wheel; the CUDA wheels' engine.so and store.so add libmlx5.
MASTER_LIBRARIES = ("libibverbs.so.1", "libnuma.so.1", "libcurl.so.4")
ENGINE_LIBRARIES = (*MASTER_LIBRARIES, "libmlx5.so.1")


def mooncake_libraries(plan: Plan, host: Host) -> tuple[str, ...]:
    """The system libraries the Mooncake processes pdctl starts on `host` need ('' none)."""
    if plan.on_kubernetes or not plan.disaggregated:
        return ()
    assert plan.shape is not None
    dis = plan.shape.dis
    if dis.connector != "mooncake":
        return ()
    if any(i.host is not None and i.host.name == host.name for i in plan.instances):
        return ENGINE_LIBRARIES
    if dis.store.enabled and master_host(plan.spec).name == host.name:
        return MASTER_LIBRARIES
    return ()


def install_hint(missing: tuple[str, ...] | list[str]) -> str:
    """The apt and dnf commands that install `missing` libraries."""
    apt = dict.fromkeys(LIBRARY_PACKAGES[lib][0] for lib in missing)
    dnf = dict.fromkeys(LIBRARY_PACKAGES[lib][1] for lib in missing)
    return (
        f"sudo apt-get install -y {' '.join(apt)} (Debian/Ubuntu) or "
        f"sudo dnf install -y {' '.join(dnf)} (RHEL/Fedora)"
    )


def engine_url(inst: Instance) -> str:
    assert inst.host is not None
    return f"http://{host_port(peer_address(inst.host), inst.port)}"


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def bind_address(spec: Spec, host: Host, what: str) -> str:
    """The address a listener on `host` binds so that the other hosts reach it: the host's peer
    address, which must be an IP (vllm-router's metrics and ZMQ discovery, mooncake_master)."""
    address = peer_address(host)
    if _is_ip(address):
        return address
    index = next(i for i, h in enumerate(spec.hosts) if h.name == host.name)
    field = "addressForPeers" if host.address_for_peers else "address"
    raise SpecError(
        f"{what} binds to host {host.name}'s peer address, and {address!r} is not an IP address",
        path=f"hosts[{index}].{field}",
        fix=f"set hosts[{index}].addressForPeers to the IP address the other hosts reach "
        f"{host.name} on",
    )


def on_one_host(plan: Plan) -> bool:
    """The router, every engine and mooncake_master run on the same host."""
    names = {i.host.name for i in plan.instances if i.host is not None}
    names.add(router_host(plan.spec).name)
    if plan.shape is not None and plan.shape.dis.store.enabled:
        names.add(master_host(plan.spec).name)
    return len(names) == 1


def router_listen(plan: Plan) -> str:
    """The router's bind address: `router.listen`; loopback when everything is on one host;
    else the router host's peer address. Never 0.0.0.0 unless the spec says so."""
    spec = plan.spec
    if spec.router.listen is not None:
        return spec.router.listen
    if on_one_host(plan):
        return "127.0.0.1"
    host = router_host(spec)
    address = peer_address(host)
    if not _is_ip(address):
        raise SpecError(
            f"the router listens on host {host.name}'s peer address by default, and "
            f"{address!r} is not an IP address (vllm-router binds IP addresses)",
            path="router.listen",
            fix=f"set router.listen to the IP address of {host.name} that clients reach",
        )
    return address


def _check_api_key(plan: Plan, listen: str) -> None:
    """vllm-router 0.1.17 authenticates no client and forwards with the engines' key: a key
    behind a router anyone can reach protects nothing, so a default that does so is refused."""
    spec = plan.spec
    if spec.secrets.api_key is None or spec.router.listen is not None:
        return
    if ipaddress.ip_address(listen).is_loopback:
        return
    raise SpecError(
        "secrets.apiKey protects the engines, but vllm-router 0.1.17 has no client "
        "authentication and forwards with the key: anyone who reaches "
        f"{host_port(listen, spec.router.port)} is authenticated",
        path="router.listen",
        fix="set router.listen to an address only trusted clients reach (127.0.0.1 with an "
        "SSH tunnel or a proxy in front), or remove secrets.apiKey",
    )


def local_address(listen: str) -> str:
    """Where a process on the same host reaches a listener bound to `listen`."""
    ip = ipaddress.ip_address(listen)
    if ip.is_unspecified:
        return "::1" if ip.version == 6 else "127.0.0.1"
    return listen


def front_door(plan: Plan, scaled: bool = False) -> tuple[Service, ...]:
    """Phase 0 on hosts: vllm-router in plain mode in front of the replicas when the spec
    writes a `router` section; one engine behind it spreads nothing, so that is refused
    (unless `pdctl scale` scaled the replicas down to one: the router stays the address)."""
    spec = plan.spec
    if plan.on_kubernetes or "router" not in spec.model_fields_set:
        return ()
    if len(plan.instances) < 2 and not scaled:
        raise SpecError(
            f"a router in front of one engine spreads nothing (the plan has {len(plan.instances)} "
            "replica)",
            path="router",
            fix="set serve.replicas to 2 or more (or list more hosts), or remove `router`",
        )
    return (router_service(plan),)


def router_service(plan: Plan) -> Service:
    spec = plan.spec
    router = spec.router
    host = router_host(spec)
    listen = router_listen(plan)
    engines = plan.instances
    args: list[str] = ["vllm-router", "--host", listen, "--port", str(router.port)]
    if plan.shape is None:
        # Plain mode forwards each client's headers, Authorization included: the engines
        # check every client's key themselves, so the router gets no key.
        args += ["--worker-urls", *(engine_url(i) for i in engines)]
    else:
        _check_api_key(plan, listen)
        args += _pd_args(plan)
    args += [
        "--policy", router.policy,
        # A dead engine is dropped after two failed checks; until then the router's retries
        # (5 by default, backoff from 50 ms) send a failed request to the next engine.
        "--health-check-interval-secs", str(router.health_check_interval_secs),
        "--health-failure-threshold", "2", "--health-success-threshold", "1",
        # Metrics name every engine URL: they listen where clients reach the router.
        "--prometheus-host", listen, "--prometheus-port", str(router.metrics_port),
    ]
    command, files = watched(plan, tuple(args))
    return Service(
        name=f"{spec.name}-router", role="router", host=host, port=router.port, command=command,
        venv=router.venv or f"~/.pdctl/venv/vllm-router-{router.version}",
        pip=f"vllm-router=={router.version}", executable="vllm-router",
        health=f"http://{host_port(local_address(listen), router.port)}/liveness", address=listen,
        wait_urls=tuple(engine_url(i) + "/health" for i in engines),
        api_key=plan.shape is not None and spec.secrets.api_key is not None,
        local=local_address(listen), files=files,
    )


WATCH_FILE = "router_watch.py"


def bootstrap_port(inst: Instance) -> int | None:
    """A Mooncake prefill's bootstrap port (None: no bootstrap server)."""
    return dict(inst.extra_ports).get("bootstrap")


def caches_engine_ids(plan: Plan) -> bool:
    """Whether vllm-router reads each prefill's engine ids once, at its own start (Mooncake):
    then a restarted prefill needs the router started again (`watched`; `up`:
    targets.state.fresh_router)."""
    return plan.shape is not None and plan.shape.dis.connector == "mooncake"


def routes_when_ready(plan: Plan) -> bool:
    """Whether the router's /readiness says it routes (what `up` waits on): P/D mode with its
    workers on its command line; in p2p-nccl's ZMQ discovery mode vllm-router 0.1.17 answers
    503 there always, and in plain mode `up` asks /liveness as `status` does."""
    return plan.shape is not None and plan.shape.dis.connector != "p2p-nccl"


def bootstrap_urls(plan: Plan) -> tuple[str, ...]:
    """Each Mooncake prefill's bootstrap server, as vllm-router asks it (its --prefill URL's
    host, the bootstrap port)."""
    out = []
    for inst in plan.instances:
        boot = bootstrap_port(inst)
        if inst.role == "prefill" and boot is not None and inst.host is not None:
            out.append(f"http://{host_port(peer_address(inst.host), boot)}")
    return tuple(out)


def watched(
    plan: Plan, args: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The router's command and unit files: with Mooncake, vllm-router runs under pdctl's
    router watch (pdctl/hostside/router_watch.py), which starts it again when a prefill comes
    back with a new engine id: vllm-router reads them once, at its start, and a restarted
    prefill's old id sends decode after KV of an engine that is gone."""
    urls = bootstrap_urls(plan)
    if not caches_engine_ids(plan) or not urls:
        return args, ()
    opts = tuple(o for u in urls for o in ("--bootstrap", u))
    return ("python3", WATCH_FILE, *opts, "--", *args), ((WATCH_FILE, source(WATCH_FILE)),)


def _pd_args(plan: Plan) -> list[str]:
    """PD mode: the engines by role, or ZMQ registration for p2p-nccl; the connector."""
    spec = plan.spec
    assert plan.shape is not None
    dis = plan.shape.dis
    args = ["--vllm-pd-disaggregation"]
    prefills = [i for i in plan.instances if i.role == "prefill"]
    decodes = [i for i in plan.instances if i.role == "decode"]
    if dis.connector == "p2p-nccl":
        # Engines register themselves over ZMQ (P2pNcclConnector's proxy protocol) at the
        # router host's peer address (their kv_transfer_config proxy_ip).
        where = bind_address(
            spec, router_host(spec), "the router's ZMQ discovery (router.discoveryPort)"
        )
        args += ["--vllm-discovery-address", host_port(where, spec.router.discovery_port)]
    else:
        for inst in prefills:
            args += ["--prefill", engine_url(inst)]
            boot = bootstrap_port(inst)
            if boot is not None:
                args.append(str(boot))
        for inst in decodes:
            args += ["--decode", engine_url(inst)]
        args += ["--kv-connector", dis.connector]
    return args


def master_service(plan: Plan) -> Service | None:
    spec = plan.spec
    assert plan.shape is not None
    dis = plan.shape.dis
    if not dis.store.enabled:
        return None
    store = dis.store
    # The master needs no GPU: the non-CUDA wheel carries the same mooncake_master binary.
    package = f"{MOONCAKE_PACKAGE[0]}=={MOONCAKE_VERSION}"
    host = master_host(spec)
    # The engines on every host reach it at its peer address; bind there, not everywhere.
    # (mooncake_master 0.3.13.post1 still binds its HTTP metadata server on all addresses.)
    address = bind_address(spec, host, "mooncake_master")
    return Service(
        name=f"{spec.name}-mooncake-master", role="master", host=host, port=store.rpc_port,
        command=(
            "mooncake_master", f"--rpc_address={address}", f"--rpc_port={store.rpc_port}",
            f"--metrics_host={address}", f"--metrics_port={store.metrics_port}",
            "--enable_http_metadata_server=true", f"--http_metadata_server_host={address}",
            f"--http_metadata_server_port={store.metadata_port}",
        ),
        venv=f"~/.pdctl/venv/mooncake-{MOONCAKE_VERSION}", pip=package,
        executable="mooncake_master",
        health=f"http://{host_port(address, store.metrics_port)}/health", address=address,
    )


def plan_services(plan: Plan) -> tuple[Service, ...]:
    """The router step: mooncake_master first, the router last (it also waits for the
    engines). make_plan runs it once and keeps the result in `Plan.services`."""
    master = master_service(plan)
    return (*((master,) if master else ()), router_service(plan))
