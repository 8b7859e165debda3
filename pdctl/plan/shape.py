"""Stage 1 of a phase 2/3 plan: the shape (prefill, decode, KV transfer) and where the
router and mooncake_master run. Lowest of the PD planning modules: it imports none of them."""

from __future__ import annotations

from dataclasses import dataclass

from pdctl.errors import SpecError
from pdctl.spec.model import Host, Spec
from pdctl.spec.pd import Decode, Disaggregation, Prefill


@dataclass(frozen=True)
class PdShape:
    """Phase 2/3: the prefill and decode sections and the KV transfer, defaults filled."""

    prefill: Prefill
    decode: Decode
    dis: Disaggregation


def pd_shape(spec: Spec, phase: int) -> PdShape:
    for section in ("prefill", "decode"):
        if getattr(spec, section) is None:
            raise SpecError(
                f"phase {phase} needs a `{section}` section", path=section,
                fix=f"add `{section}: {{replicas: 1, tensorParallel: 1}}`",
            )
    assert spec.prefill is not None and spec.decode is not None
    return PdShape(spec.prefill, spec.decode, spec.disaggregation or Disaggregation())


def router_host(spec: Spec) -> Host:
    """The host that runs the router (and, by default, mooncake_master)."""
    name = spec.router.host
    if name is None:
        if not spec.hosts:
            raise SpecError("no hosts", path="hosts", fix="add at least one host")
        return spec.hosts[0]
    return find_host(spec, name, "router.host")


def find_host(spec: Spec, name: str, path: str) -> Host:
    for host in spec.hosts:
        if host.name == name:
            return host
    known = ", ".join(h.name for h in spec.hosts) or "none"
    raise SpecError(f"no host named {name!r} (hosts: {known})", path=path, fix="name a host")


def peer_address(host: Host) -> str:
    return host.address_for_peers or host.address


def master_host(spec: Spec) -> Host:
    dis = spec.disaggregation
    if dis is not None and dis.store.host is not None:
        return find_host(spec, dis.store.host, "disaggregation.store.host")
    return router_host(spec)


def check_shape(spec: Spec, shape: PdShape) -> None:
    """What no placement can fix: a connector the device or the addresses cannot carry."""
    _check_device(spec, shape.dis)
    _check_p2p_ipv4(spec, shape.dis)
    _check_p2p_tensor_parallel(shape)


def _check_device(spec: Spec, dis: Disaggregation) -> None:
    if spec.engine.device == "cpu" and dis.connector != "nixl":
        raise SpecError(
            f"connector {dis.connector} needs CUDA engines", path="disaggregation.connector",
            fix="use connector nixl (with kvBufferDevice cpu) for engine.device cpu",
        )


def _check_p2p_ipv4(spec: Spec, dis: Disaggregation) -> None:
    """P2pNcclEngine binds and announces `tcp://{VLLM_HOST_IP}:{port}` without brackets and
    without ZMQ's IPV6 option (vLLM 0.23.0 p2p_nccl_engine.py), so IPv6 peers cannot work."""
    if dis.connector != "p2p-nccl":
        return
    for i, host in enumerate(spec.hosts):
        if ":" in peer_address(host):
            field = "addressForPeers" if host.address_for_peers else "address"
            raise SpecError(
                f"p2p-nccl needs IPv4 peer addresses ({peer_address(host)} is IPv6): vLLM's "
                "P2pNcclEngine builds its ZMQ address as host:port without brackets",
                path=f"hosts[{i}].{field}",
                fix="set hosts[].addressForPeers to an IPv4 address, or use connector "
                "mooncake or nixl",
            )


def _check_p2p_tensor_parallel(shape: PdShape) -> None:
    """P2pNcclConnector pairs ranks one to one: prefill rank r sends its KV shard to the decode's
    `kv_port + r` (vLLM 0.23.0 p2p_nccl_connector.py), so unequal TP sends shards to the wrong
    engine or to no one. Mooncake and NIXL map different TP sizes themselves."""
    pre, dec = shape.prefill.tensor_parallel, shape.decode.tensor_parallel
    if shape.dis.connector == "p2p-nccl" and pre != dec:
        raise SpecError(
            f"p2p-nccl needs the same tensorParallel on prefill ({pre}) and decode ({dec}): "
            "P2pNcclConnector sends prefill rank r's KV to the decode's kv_port + r",
            path="decode.tensorParallel",
            fix=f"set decode.tensorParallel: {pre}, or use connector mooncake or nixl",
        )
