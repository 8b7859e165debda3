"""The processes besides the engines on bare metal: the request router (the paper's
"Conductor" role) and, for the Mooncake shared store, mooncake_master. Pure, from the plan."""

from __future__ import annotations

from dataclasses import dataclass

from pdctl.compat import MOONCAKE_PACKAGE, MOONCAKE_VERSION
from pdctl.plan.model import Instance, Plan
from pdctl.plan.pd import master_host, pd_shape, peer_address, router_host
from pdctl.spec.model import Host
from pdctl.spec.value import host_port


@dataclass(frozen=True)
class Service:
    """A non-engine process pdctl starts on a host, from its own pinned Python environment."""

    name: str
    role: str  # "router" | "master"
    host: Host
    port: int
    command: tuple[str, ...]
    venv: str
    pip: str
    executable: str
    health: str  # URL that answers 200 on the service host when it is up
    wait_urls: tuple[str, ...] = ()  # health URLs that must answer before it starts
    api_key: bool = False  # export OPENAI_API_KEY from the engines' VLLM_API_KEY


def engine_url(inst: Instance) -> str:
    assert inst.host is not None
    return f"http://{host_port(peer_address(inst.host), inst.port)}"


def router_service(plan: Plan) -> Service:
    spec = plan.spec
    dis = pd_shape(spec, plan.phase).dis
    router = spec.router
    host = router_host(spec)
    prefills = [i for i in plan.instances if i.role == "prefill"]
    decodes = [i for i in plan.instances if i.role == "decode"]
    args: list[str] = [
        "vllm-router",
        "--host", "0.0.0.0",
        "--port", str(router.port),
        "--vllm-pd-disaggregation",
    ]
    if dis.connector == "p2p-nccl":
        # Engines register themselves over ZMQ (P2pNcclConnector's proxy protocol).
        args += ["--vllm-discovery-address", f"0.0.0.0:{router.discovery_port}"]
    else:
        for inst in prefills:
            args += ["--prefill", engine_url(inst)]
            boot = dict(inst.extra_ports).get("bootstrap")
            if boot is not None:
                args.append(str(boot))
        for inst in decodes:
            args += ["--decode", engine_url(inst)]
        args += ["--kv-connector", dis.connector]
    args += [
        "--policy", router.policy,
        "--health-check-interval-secs", str(router.health_check_interval_secs),
        "--health-failure-threshold", "2",
        "--health-success-threshold", "1",
        "--prometheus-host", "0.0.0.0",
        "--prometheus-port", str(router.metrics_port),
    ]
    return Service(
        name=f"{spec.name}-router",
        role="router",
        host=host,
        port=router.port,
        command=tuple(args),
        venv=router.venv or f"~/.pdctl/venv/vllm-router-{router.version}",
        pip=f"vllm-router=={router.version}",
        executable="vllm-router",
        health=f"http://127.0.0.1:{router.port}/liveness",
        wait_urls=tuple(engine_url(i) + "/health" for i in (*prefills, *decodes)),
        api_key=spec.secrets.api_key is not None,
    )


def master_service(plan: Plan) -> Service | None:
    spec = plan.spec
    dis = pd_shape(spec, plan.phase).dis
    if not dis.store.enabled:
        return None
    store = dis.store
    # The master needs no GPU: the non-CUDA wheel carries the same mooncake_master binary.
    package = f"{MOONCAKE_PACKAGE[0]}=={MOONCAKE_VERSION}"
    return Service(
        name=f"{spec.name}-mooncake-master",
        role="master",
        host=master_host(spec),
        port=store.rpc_port,
        command=(
            "mooncake_master",
            f"--rpc_port={store.rpc_port}",
            f"--metrics_port={store.metrics_port}",
            "--enable_http_metadata_server=true",
            "--http_metadata_server_host=0.0.0.0",
            f"--http_metadata_server_port={store.metadata_port}",
        ),
        venv=f"~/.pdctl/venv/mooncake-{MOONCAKE_VERSION}",
        pip=package,
        executable="mooncake_master",
        health=f"http://127.0.0.1:{store.metrics_port}/health",
    )


def services(plan: Plan) -> tuple[Service, ...]:
    """Start order: mooncake_master first, the router last (it also waits for the engines)."""
    master = master_service(plan)
    return (*((master,) if master else ()), router_service(plan))
