"""Who connects to whom across hosts, and the loopback peer addresses that cannot work.

A process reaches another host's process at that host's peer address (`addressForPeers`, or
`address`). A loopback peer address (127.0.0.0/8, ::1, `localhost`) is reachable only from the
machine itself: fine while every process that connects there runs on a loopback host too (one
machine: test rigs list it several times on different SSH ports), a wrong plan when a host with
a real address must connect there — it would reach its own loopback. Who connects where:
- the router sends requests to every engine (prefill, decode, serve);
- a multi-node group's workers join the leader (`--master-addr`, the data-parallel address);
- P2pNcclConnector: every engine registers with the router's proxy, and prefill sends KV to
  the decode's `kv_port` (vLLM 0.23.0 p2p_nccl_engine.py);
- NIXL: decode reads KV from the prefill's side channel (VLLM_NIXL_SIDE_CHANNEL_HOST);
- Mooncake: the transfer engines reach each other, and every engine reaches mooncake_master.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from pdctl.errors import SpecError
from pdctl.plan.model import Instance, Plan
from pdctl.plan.shape import peer_address
from pdctl.spec.model import Host

Link = tuple[Host, Host, str]  # (host reached, host connecting, what connects)


def is_loopback(address: str) -> bool:
    if address.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _engines(plan: Plan) -> list[Instance]:
    return [i for i in plan.instances if i.host is not None and not i.leader]


def links(plan: Plan) -> Iterator[Link]:
    """Every (reached, connecting, what) pair of the plan on hosts."""
    for inst in plan.instances:
        for worker in inst.workers:
            if inst.host is not None and worker.host is not None:
                yield inst.host, worker.host, f"{worker.name} joins its group's leader"
    routers = [s for s in plan.services if s.role == "router"]
    masters = [s for s in plan.services if s.role == "master"]
    engines = _engines(plan)
    for router in routers:
        for e in engines:
            assert e.host is not None
            yield e.host, router.host, f"the router sends requests to {e.name}"
    if plan.shape is None:
        return
    connector = plan.shape.dis.connector
    prefill = [e for e in engines if e.role == "prefill"]
    decode = [e for e in engines if e.role == "decode"]
    for p in prefill:
        for d in decode:
            assert p.host is not None and d.host is not None
            if connector in ("p2p-nccl", "mooncake"):
                yield d.host, p.host, f"{p.name} sends KV to {d.name}"
            if connector in ("nixl", "mooncake"):
                yield p.host, d.host, f"{d.name} reads KV from {p.name}"
    for e in engines:
        assert e.host is not None
        if connector == "p2p-nccl":
            for router in routers:
                yield router.host, e.host, f"{e.name} registers with the router's proxy"
        for master in masters:
            yield master.host, e.host, f"{e.name} reaches mooncake_master"


def check_loopback_peers(plan: Plan) -> None:
    """One SpecError for the first host reached at a loopback peer address from a host that
    is another machine."""
    for reached, connecting, what in links(plan):
        address = peer_address(reached)
        if not is_loopback(address) or is_loopback(peer_address(connecting)):
            continue
        index = next(i for i, h in enumerate(plan.spec.hosts) if h.name == reached.name)
        field = "addressForPeers" if reached.address_for_peers else "address"
        raise SpecError(
            f"{what}, but host {reached.name}'s peer address {address} is loopback: host "
            f"{connecting.name} ({peer_address(connecting)}) would reach its own",
            path=f"hosts[{index}].{field}",
            fix=f"set hosts[{index}].addressForPeers to the address {connecting.name} reaches "
            f"{reached.name} on",
        )
