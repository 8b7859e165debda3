"""Every port a bare-metal PD deployment listens on, who connects to it, and clash checks."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from pdctl.errors import SpecError
from pdctl.plan.group import all_nodes
from pdctl.plan.model import Instance, Plan, PortRule, Service

# Ranges that are not pdctl's choice but must be open between engine hosts.
MOONCAKE_TE_RANGE = (15000, 17000)  # transfer-engine handshake (P2PHANDSHAKE, MC_MIN/MAX_RPC_PORT)
EPHEMERAL = "32768-60999"  # Linux ip_local_port_range default: random UCX/NCCL ports
# MooncakeConnector binds its ZMQ side channel with pyzmq's bind_to_random_port, whose default
# range is 49152-65535 (above the Linux ephemeral range), so its rule spans both.
MOONCAKE_RANDOM = "32768-65535"


def _span(first: int, count: int) -> str:
    return str(first) if count == 1 else f"{first}-{first + count - 1}"


def _taker():
    """take(host, first, count, owner, path): claims ports, SpecError on a clash."""
    used: dict[tuple[str, int], str] = {}

    def take(host, first: int, count: int, owner: str, path: str) -> None:
        for port in range(first, first + count):
            clash = used.get((host.name, port))
            if clash is not None:
                raise SpecError(
                    f"port {port} on host {host.name} is used by {clash} and {owner}", path=path,
                    fix="move one of them to a free port range",
                )
            used[(host.name, port)] = owner

    return take


def group_ports(plan: Plan) -> tuple[PortRule, ...]:
    """Phases 0 and 1 on hosts: the ports multi-node groups need between their nodes and the
    phase 0 router's (none otherwise: single-node instances only take their HTTP port)."""
    if plan.on_kubernetes or not (plan.services or any(i.workers for i in plan.instances)):
        return ()
    rules: list[PortRule] = []
    take = _taker()
    for inst in plan.instances:
        assert inst.host is not None
        peers = inst.host.address_for_peers or inst.host.address
        purpose = f"{inst.name} HTTP (vLLM API)"
        take(inst.host, inst.port, 1, purpose, "serve.port")
        opened_to = "the router" if plan.services else "clients"
        rules.append(
            PortRule(inst.host.name, peers, str(inst.port), opened_to, purpose, "serve.port")
        )
        rules += _group_rules(inst, take)
    for svc in plan.services:
        rules += _service_rules(svc, plan, take)
    return tuple(rules)


def _group_rules(inst: Instance, take: Callable[..., None]) -> list[PortRule]:
    """A group leader's rendezvous port, each node's guard port (plan/guard.py), and the random
    ports between the group's nodes."""
    port = dict(inst.extra_ports).get("rendezvous")
    if port is None or inst.host is None:
        return []
    members = ", ".join(n.host.name for n in inst.workers if n.host is not None)
    peers = inst.host.address_for_peers or inst.host.address
    out = [
        PortRule(
            inst.host.name, peers, str(port), f"its group's nodes ({members})",
            f"{inst.name} group rendezvous", f"{inst.role}.rendezvousPort",
        )
    ]
    for node in (inst, *inst.workers):
        assert node.host is not None
        guard = dict(node.extra_ports).get("guard")
        if guard is not None:
            purpose = f"{node.name} group guard (pdctl's watch over the group's nodes)"
            take(node.host, guard, 1, purpose, f"{inst.role}.nodes")
            out.append(
                PortRule(
                    node.host.name, node.host.address_for_peers or node.host.address, str(guard),
                    f"its group's nodes ({inst.name})", purpose, "",
                )
            )
        out.append(
            PortRule(
                node.host.name, node.host.address_for_peers or node.host.address, EPHEMERAL,
                f"its group's nodes ({inst.name})",
                "NCCL/Gloo and vLLM's ZMQ between a group's nodes (random ports)", "",
            )
        )
    return out


def port_rules(plan: Plan) -> tuple[PortRule, ...]:
    """The firewall step (after the router step): the list for hosts, checked for clashes
    between everything pdctl starts. make_plan keeps it in `Plan.ports`."""
    assert plan.shape is not None
    dis = plan.shape.dis
    rules: list[PortRule] = []
    take = _taker()

    def add(host, first: int, count: int, opened_to: str, purpose: str, path: str) -> None:
        take(host, first, count, purpose, path)
        address = host.address_for_peers or host.address
        rules.append(PortRule(host.name, address, _span(first, count), opened_to, purpose, path))

    nodes = all_nodes(plan.instances)
    engine_hosts = sorted({i.host.name for i in nodes if i.host is not None})
    all_engines = "engine hosts (" + ", ".join(engine_hosts) + ")"
    for inst in nodes:
        assert inst.host is not None
        path = f"{inst.role}.port"
        if not inst.leader:  # a headless node of a group serves no API
            add(inst.host, inst.port, 1, "router", f"{inst.name} HTTP (vLLM API)", path)
        extra = dict(inst.extra_ports)
        if "rendezvous" in extra:
            take(
                inst.host, extra["rendezvous"], 1, f"{inst.name} group rendezvous",
                f"{inst.role}.rendezvousPort",
            )
            rules += _group_rules(inst, take)
        if "kv" in extra:
            add(
                inst.host, extra["kv"], inst.tensor_parallel, all_engines,
                f"{inst.name} P2pNccl ZMQ (kv_port + tp_rank)", "disaggregation.kvPort",
            )
        if "bootstrap" in extra:
            add(
                inst.host, extra["bootstrap"], 1, "router, decode hosts",
                f"{inst.name} Mooncake bootstrap", "disaggregation.bootstrapPort",
            )
        sides = [p for k, p in inst.extra_ports if k == "nixl-side-channel"]
        if sides:
            # A node of a data-parallel group: one side channel per local rank.
            add(
                inst.host, sides[0], len(sides), all_engines,
                f"{inst.name} NIXL side channel"
                + ("s (one per DP rank)" if len(sides) > 1 else ""),
                "disaggregation.sideChannelPort",
            )
    for svc in plan.services:
        rules += _service_rules(svc, plan, take)
    hosts = {i.host.name: i.host for i in nodes if i.host is not None}
    for name in engine_hosts:
        host = hosts[name]
        address = host.address_for_peers or host.address
        if dis.connector == "mooncake":
            rules.append(
                PortRule(
                    name, address, "{}-{}".format(*MOONCAKE_TE_RANGE), all_engines,
                    "Mooncake transfer-engine handshake (random port in range)", "",
                )
            )
        span, transport = {
            "p2p-nccl": (EPHEMERAL, "NCCL sockets (random ephemeral ports)"),
            "mooncake": (
                MOONCAKE_RANDOM,
                "Mooncake ZMQ side channel (pyzmq random port "
                "49152-65535) and other random ephemeral ports",
            ),
            "nixl": (EPHEMERAL, "UCX (random ephemeral ports)"),
        }[dis.connector]
        rules.append(PortRule(name, address, span, all_engines, transport, ""))
    return tuple(rules)


def _service_rules(svc: Service, plan: Plan, take) -> list[PortRule]:
    spec = plan.spec
    peers = svc.host.address_for_peers or svc.host.address
    out = []
    items: list[tuple[int, str, str, str, str]] = []
    if svc.role == "router":
        r = spec.router
        local = ipaddress.ip_address(svc.address).is_loopback
        clients = "this host only (an SSH tunnel or a proxy)" if local else "clients"
        monitoring = "this host only" if local else "monitoring"
        where = svc.address + " (`router.listen`)"
        items = [
            (r.port, where, clients, "router HTTP (OpenAI API; /liveness)", "router.port"),
            (r.metrics_port, where, monitoring, "router Prometheus metrics", "router.metricsPort"),
        ]
        if plan.shape is not None and plan.shape.dis.connector == "p2p-nccl":
            items.append(
                (
                    r.discovery_port, peers, "engine hosts",
                    "router ZMQ discovery (P2pNccl registration)", "router.discoveryPort",
                )
            )
    else:
        assert plan.shape is not None
        st = plan.shape.dis.store
        p = "disaggregation.store."
        items = [
            (st.rpc_port, svc.address, "engine hosts", "mooncake_master RPC", p + "rpcPort"),
            # 0.3.13.post1 binds it on every address, whatever the host flag says.
            (
                st.metadata_port, "every address (0.0.0.0)", "engine hosts",
                "mooncake_master HTTP metadata server", p + "metadataPort",
            ),
            (
                st.metrics_port, svc.address, "monitoring", "mooncake_master metrics and /health",
                p + "metricsPort",
            ),
        ]
    for port, address, opened_to, purpose, path in items:
        take(svc.host, port, 1, purpose, path)
        out.append(PortRule(svc.host.name, address, str(port), opened_to, purpose, path))
    return out
