"""`--kv-transfer-config` documents per connector, checked against the pinned vLLM version."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from pdctl.compat import Release, parse_version
from pdctl.errors import SpecError
from pdctl.plan.model import Caution
from pdctl.plan.mooncake_tcp import tcp_env
from pdctl.spec.pd import Disaggregation
from pdctl.spec.value import url_host
from pdctl.spec.workload import Workload

CONNECTOR_CLASS = {
    "p2p-nccl": "P2pNcclConnector", "mooncake": "MooncakeConnector", "nixl": "NixlConnector",
}
ROLES = {"prefill": "kv_producer", "decode": "kv_consumer"}
# p2p-nccl producers in PUT_ASYNC mode send and keep no buffer; upstream uses 1e1 for them.
P2P_PRODUCER_BUFFER = 10
P2P_DEFAULT_BUFFER = 8_000_000_000  # the upstream decode example (10% of an 80 GB GPU)
GIB = 1024**3  # disaggregation.gpuMemoryGib is in GiB; kv_buffer_size is in bytes
# P2pNccl keys each KV tensor by the request id (`request_id + "#" + layer`). Since vLLM 0.14
# every engine appends 8 random characters to it (vllm PR #27987; 0.23.0
# vllm/v1/engine/input_processor.py `assign_request_id`), so prefill and decode look for
# different keys and decode waits forever (vllm#42839). vLLM's own switch (envs.py, vllm PR
# #34415) keeps the router's id as it is.
P2P_ENV = (("VLLM_DISABLE_REQUEST_ID_RANDOMIZATION", "1"),)
# NixlConnector's KV lease, in seconds (`kv_connector_extra_config.kv_lease_duration`; vLLM
# 0.23.0 nixl/scheduler.py reads it with a default of 30, and 0.33.0 still does). A prefill
# keeps a finished request's KV blocks that long unless the decode's heartbeats (every
# lease/6 s, each extending it by 2/3 of the lease) renew it; heartbeats start only once the
# decode's scheduler holds the request and its NIXL handshake with that prefill is done. Past
# the lease the blocks go back to the free pool and a decode that reads them later gets
# whatever another request wrote there: HTTP 200 with wrong tokens. The hold before the
# first heartbeat is the router's hop plus the decode's first handshake with a (re)started
# peer: 30-62 s measured on the CPU e2e deployment after a restart, above the default. 240 s
# keeps a margin; it only costs prefill KV blocks for requests whose decode never reads them
# (the decode died, or the router dropped the request). docs/phase2-bare-metal.md explains.
# The lease is the plan's expected hold: that handshake, then a wait for a decode slot of up
# to two whole generations of the workload's mean output at its TPOT (a waiting request gets a
# slot when a running one ends; twice the mean covers longer answers), never under 240 s.
NIXL_KV_LEASE_S = 240
NIXL_HANDSHAKE_S = 60
SLOW_TPOT_S = 0.1  # no workload.tpotMs: a slow decode step


# MooncakeConnector's counterpart (vLLM 0.23.0 envs.py, default 480 s): prefill frees a
# finished request's unsent KV blocks after it, waits that long for a request decode asks for
# to finish prefill ("Timeout waiting for P side ready"), and decode waits it + 60 s for
# prefill's answer (mooncake_connector.py: SendBlockMeta.expire_time, send_kv_to_decode,
# zmq.RCVTIMEO). pdctl sets it to the same expected hold on both sides; an engine.env or role
# env value of the user's wins.
MOONCAKE_TIMEOUT_ENV = "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT"

def mooncake_env(
    dis: Disaggregation, workload: Workload | None, *user: Mapping[str, str]
) -> list[tuple[str, str]]:
    """The environment pdctl gives every Mooncake engine, less what the user's env sets: the
    plan's KV hold as the connector's timeout, and over TCP the room for the largest KV pull
    Mooncake's transport can take (pdctl/plan/mooncake_tcp.py)."""
    hold = kv_lease_s(workload)
    out = [(MOONCAKE_TIMEOUT_ENV, str(hold))]
    if dis.protocol == "tcp":
        out += tcp_env(hold)
    return [(k, v) for k, v in out if not any(k in env for env in user)]


def kv_lease_s(workload: Workload | None) -> int:
    """The KV hold a deployment with this workload expects (seconds, a multiple of 10):
    NIXL's kv_lease_duration and Mooncake's VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT."""
    out = workload.output_tokens if workload else Workload().output_tokens
    tpot = workload.tpot_ms / 1000 if workload and workload.tpot_ms else SLOW_TPOT_S
    hold = NIXL_HANDSHAKE_S + 2 * out * tpot
    return max(NIXL_KV_LEASE_S, 10 * math.ceil(hold / 10))


def connector_classes(dis: Disaggregation) -> list[str]:
    """Every vLLM connector class a deployment uses."""
    names = [CONNECTOR_CLASS[dis.connector]]
    if dis.store.enabled:
        names += ["MultiConnector", "MooncakeStoreConnector"]
    return names


def require_connectors(dis: Disaggregation, release: Release) -> None:
    for name in connector_classes(dis):
        release.require_connector(name, path="disaggregation.connector")


def p2p_buffer_bytes(dis: Disaggregation, role: str) -> int:
    """P2pNcclConnector's `kv_buffer_size` for `role` (bytes): what p2p_config emits and what
    the capacity plan counts beside the engine's --gpu-memory-utilization budget. A decode's
    listener keeps each received KV tensor on the GPU (`torch.empty(..., device=self.device)`)
    while `buffer_size + tensor_size <= buffer_size_threshold` (= kv_buffer_size), and only
    past it moves tensors to the host's TensorMemoryPool (vLLM 0.23.0
    vllm/distributed/kv_transfer/kv_connector/v1/p2p/p2p_nccl_engine.py, `listen_for_requests`,
    the "PUT" branch). That memory is allocated after vLLM sized its KV cache from the budget,
    so it comes on top of it; upstream's 1P3D example therefore runs its decodes at
    --gpu-memory-utilization 0.7 with kv_buffer_size 8e9 on an 80 GB GPU and its prefills at
    0.9 with 1e1 (docs/design/p2p_nccl_connector.md, "Run 1P3D")."""
    if role == "prefill":
        return P2P_PRODUCER_BUFFER
    if dis.gpu_memory_gib is not None:
        return int(dis.gpu_memory_gib * GIB * 0.1)
    return P2P_DEFAULT_BUFFER


def p2p_config(
    dis: Disaggregation, role: str, *, kv_port: int, http_port: int, proxy: tuple[str, int]
) -> dict[str, Any]:
    buffer = p2p_buffer_bytes(dis, role)
    return {
        "kv_connector": "P2pNcclConnector", "kv_role": ROLES[role], "kv_buffer_size": buffer,
        "kv_port": kv_port,
        # proxy_ip + ":" + proxy_port is concatenated by vLLM: both must be strings, and an
        # IPv6 proxy_ip needs its brackets.
        "kv_connector_extra_config": {
            "proxy_ip": url_host(proxy[0]), "proxy_port": str(proxy[1]),
            "http_port": str(http_port), "send_type": "PUT_ASYNC",
        },
    }


# vLLM's MooncakeConnector reads kv_connector_extra_config.device_name from 0.25.0 on; up to
# 0.24.0 it passes "" to TransferEngine.initialize and Mooncake picks the RDMA NICs itself
# (0.23.0 vllm/distributed/kv_transfer/kv_connector/v1/mooncake/mooncake_connector.py l.765
# `self.engine.initialize(self.hostname, "P2PHANDSHAKE", protocol, "")`; 0.24.0 the same;
# 0.25.0 l.932 and 0.33.0 l.1261-1268 read "device_name"; checked in each release's wheel).
MOONCAKE_DEVICE_NAME_FROM = (0, 25, 0)


def honours_device_name(version: str) -> bool:
    """Whether vLLM `version`'s MooncakeConnector passes device_name to Mooncake."""
    return parse_version(version) >= MOONCAKE_DEVICE_NAME_FROM


# Up to 0.29.0 the decode side of vLLM's MooncakeConnector only logs a failed KV pull (an
# ERROR answer, "Timeout waiting for P side ready", a transfer or bootstrap failure): the
# request leaves WAITING_FOR_REMOTE_KVS only through finished_recving, so it waits there for
# good, holding its KV blocks, and `kv_load_failure_policy` does nothing because the connector
# has no get_block_ids_with_load_errors (vllm#35943, vllm#50719). vLLM PR #50984 reports such
# failures to the scheduler; its first release is 0.30.0 (read in the wheels: 0.29.0's
# mooncake_connector.py has no get_block_ids_with_load_errors, 0.30.0's has it and
# _handle_failed_recv). From then the default policy `fail` ends the request with an error.
MOONCAKE_REPORTS_FAILED_LOADS_FROM = (0, 30, 0)


def mooncake_cautions(dis: Disaggregation | None, version: str) -> tuple[Caution, ...]:
    """A Mooncake deployment on a vLLM whose decode strands the requests whose KV pull failed,
    located at engine.version."""
    if dis is None or dis.connector != "mooncake":
        return ()
    if parse_version(version) >= MOONCAKE_REPORTS_FAILED_LOADS_FROM:
        return ()
    return (Caution(
        "engine.version",
        f"vLLM {version}'s MooncakeConnector leaves a decode request whose KV pull failed "
        "waiting for good, holding its KV blocks, until the decode restarts (vllm#50719; "
        "fixed in 0.30.0 by vllm PR #50984)",
        "pin engine.version 0.30.0 or later, or use disaggregation.connector nixl",
    ),)


def mooncake_config(dis: Disaggregation, role: str, version: str) -> dict[str, Any]:
    extra: dict[str, Any] = {"mooncake_protocol": dis.protocol}
    if dis.device_name and honours_device_name(version):  # older vLLM ignores it
        extra["device_name"] = dis.device_name
    direct = {
        "kv_connector": "MooncakeConnector", "kv_role": ROLES[role],
        "kv_connector_extra_config": extra,
    }
    if not dis.store.enabled:
        return direct
    store = {
        "kv_connector": "MooncakeStoreConnector",
        "kv_role": "kv_both" if role == "prefill" else "kv_consumer",
    }
    return {
        "kv_connector": "MultiConnector", "kv_role": ROLES[role],
        "kv_connector_extra_config": {"connectors": [direct, store]},
    }


def nixl_config(
    kv_role: str, buffer_device: str | None, lease: int | None = None
) -> dict[str, Any]:
    cfg: dict[str, Any] = {"kv_connector": "NixlConnector", "kv_role": kv_role}
    if buffer_device is not None:
        cfg["kv_buffer_device"] = buffer_device
    if lease is not None:
        cfg["kv_connector_extra_config"] = {"kv_lease_duration": lease}
    return cfg


def check_kv_keys(cfg: dict[str, Any], release: Release) -> None:
    """Every key (nested MultiConnector documents too) must exist in the pinned version."""
    for key in cfg:
        if not release.has_kv_key(key):
            raise SpecError(
                f"--kv-transfer-config key {key} does not exist in vLLM {release.version}",
                path="engine.version",
                fix="pin an engine.version that has it, or choose another connector",
            )
    for nested in cfg.get("kv_connector_extra_config", {}).get("connectors", []):
        check_kv_keys(nested, release)


def kv_json(cfg: dict[str, Any]) -> str:
    return json.dumps(cfg, separators=(",", ":"))


def kv_args(cfg: dict[str, Any], release: Release) -> list[tuple[str, str]]:
    check_kv_keys(cfg, release)
    return [("--kv-transfer-config", kv_json(cfg))]
