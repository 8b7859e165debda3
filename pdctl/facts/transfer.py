"""Facts of the network preflight (probe/transfer.py writes the raw outputs). Pure.

- `net-devices.txt` (every phase 2 host): one line per network interface,
  `NAME OPERSTATE`, from /sys/class/net;
- `group-transfer-GROUP.jsonl` (a multi-node group leader's host): pdctl's `group` line
  (backend, address, port, nodes), then every rank's JSON lines (`side` rank0, rank1, ...),
  or `skipped`;
- `transfer-to-DECODE.jsonl` (a prefill host's folder): the transfer from this host to
  DECODE: pdctl's `pair` line (transport, address, port, bounds), then the JSON lines of both
  agents (`side` listen or send) and their log lines (`{"event": "log", ...}`), or a
  `skipped` line saying why no transfer was tried.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pdctl.preflight.facts import Transfer

NET_DEVICES = "net-devices.txt"
PEERMEM = "nvidia-peermem.txt"  # `loaded` or `absent`: /sys/module/nvidia_peermem
TRANSFER_PREFIX = "transfer-to-"
TRANSFER_SUFFIX = ".jsonl"
# Variables that name network interfaces or RDMA devices the transports must find.
IFACE_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "UCX_NET_DEVICES")


TRANSPORTS = {"nixl": "nixl", "mooncake": "mooncake", "p2p-nccl": "nccl"}


def transport_of(connector: str | None) -> str:
    """The transport a connector moves KV with (`tcp` for any other)."""
    return TRANSPORTS.get(connector or "", "tcp")


def host_pairs(instances: Any) -> list[tuple[Any, Any]]:
    """(prefill, decode) instances, one pair per (prefill host, decode host), the hosts'
    first instances standing for them, in plan order. Duck-typed over the plan's instances
    (role, host.name): facts sit below the plan."""
    out: dict[tuple[str, str], tuple[Any, Any]] = {}
    placed = [i for i in instances if i.host is not None]
    for p in (i for i in placed if i.role == "prefill"):
        for d in (i for i in placed if i.role == "decode"):
            out.setdefault((p.host.name, d.host.name), (p, d))
    return list(out.values())


RDMA_TLS = ("rc", "ud", "dc", "ib", "rdma", "all")  # UCX_TLS names that mean verbs


def uses_rdma(protocol: str, env: dict[str, str], rdma_devices: tuple[str, ...]) -> bool:
    """Whether an instance's KV transfer would register memory with an RDMA NIC: Mooncake's
    protocol rdma, UCX_TLS naming verbs transports (or RDMA `DEVICE:PORT` in
    UCX_NET_DEVICES), NCCL_IB_HCA, or the host's rdmaDevices."""
    tls = [x.strip().split("_")[0] for x in env.get("UCX_TLS", "").lstrip("^").split(",")]
    return (
        protocol == "rdma"
        or (not env.get("UCX_TLS", "").startswith("^") and any(t in RDMA_TLS for t in tls))
        or ":" in env.get("UCX_NET_DEVICES", "")
        or bool(env.get("NCCL_IB_HCA"))
        or bool(rdma_devices)
    )


def transfer_file(decode_host: str) -> str:
    return f"{TRANSFER_PREFIX}{decode_host}{TRANSFER_SUFFIX}"


GROUP_PREFIX = "group-transfer-"


def group_file(group: str) -> str:
    return f"{GROUP_PREFIX}{group}{TRANSFER_SUFFIX}"


def parse_net_devices(text: str) -> tuple[str, ...]:
    """Interface names, sorted (`lo` included)."""
    names = {line.split()[0] for line in text.splitlines() if line.split()}
    return tuple(sorted(n for n in names if re.fullmatch(r"[A-Za-z0-9_.:@-]{1,64}", n)))


def named_interfaces(var: str, value: str) -> tuple[tuple[str, bool], ...]:
    """(name, exact) pairs a variable requires to exist: NCCL_SOCKET_IFNAME and
    GLOO_SOCKET_IFNAME are prefixes (`eth` matches eth0) unless `=`-prefixed, and `^` lists
    are exclusions (nothing required); UCX_NET_DEVICES names devices exactly, `all` or RDMA
    `DEVICE:PORT` entries (checked with the RDMA devices, not here) excepted."""
    value = value.strip()
    if not value or value.startswith("^"):
        return ()
    if var == "UCX_NET_DEVICES":
        return tuple((n, True) for n in value.split(",") if n and n != "all" and ":" not in n)
    exact = value.startswith("=")
    return tuple((n, exact) for n in value.lstrip("=").split(",") if n)


def missing_interfaces(
    env: dict[str, str], network_interface: str | None, present: tuple[str, ...]
) -> list[str]:
    """`VAR=value` (or `networkInterface=value`) for each named interface that is absent."""
    wanted = [(v, env[v]) for v in IFACE_VARS if env.get(v)]
    if network_interface:
        wanted.append(("networkInterface", "=" + network_interface))
    out = []
    for var, value in wanted:
        for name, exact in named_interfaces(var, value):
            ok = name in present if exact else any(p.startswith(name) for p in present)
            if not ok:
                out.append(f"{var}={value.lstrip('=') if var == 'networkInterface' else value}")
                break
    return out


def parse_transfer(decode: str, text: str) -> Transfer:
    """The transfer file of one pair; unreadable lines are kept as log lines."""
    fields: dict = {"decode": decode}
    logs: list[str] = []
    failure: dict | None = None
    result: dict | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            logs.append(line.strip()[:500])
            continue
        if not isinstance(ev, dict):
            continue
        kind = ev.get("event")
        if kind == "pair":
            for key in ("transport", "address"):
                fields[key] = str(ev.get(key, ""))
            fields["port"] = int(ev.get("port") or 0)
        elif kind == "skipped":
            fields["skipped"] = str(ev.get("reason", "skipped"))
        elif kind == "log":
            logs.append(str(ev.get("line", ""))[:500])
        elif kind == "connected":
            fields["connected"] = True
        elif kind == "phase":
            key = "listen_phase" if ev.get("side") == "listen" else "phase"
            fields[key] = str(ev.get("name", ""))[:200]
        elif kind == "error" and failure is None:
            failure = ev
        elif kind == "result" and (result is None or ev.get("side") == "listen"):
            result = ev  # the listener's copy holds `verified`
    if result is not None:
        fields.update(
            bytes=int(result.get("bytes") or 0),
            seconds=float(result.get("seconds") or 0),
            gbps=float(result.get("gbps") or 0),
            latency_us=_number(result.get("latency_us")),
            verified=bool(result.get("verified")),
            memory=str(result.get("memory") or "")[:200],
        )
    if failure is not None:
        fields.update(
            side=str(failure.get("side", "")),
            stage=str(failure.get("stage", "")),
            errno=str(failure.get("errno", "")),
            message=str(failure.get("message", ""))[:2000],
        )
    return Transfer(**fields, logs=tuple(logs[-50:]))


def parse_group(group: str, text: str) -> Transfer:
    """A group's all-to-all: the slowest rank's bandwidth, the worst latency, verified when
    every node's rank reported its slices right; the first failure otherwise."""
    lines = []
    nodes, results = 0, []
    for line in text.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            ev = None
        if isinstance(ev, dict) and ev.get("event") == "group":
            nodes = len(ev.get("nodes") or ())
            ev = {**ev, "event": "pair", "transport": str(ev.get("backend", ""))}
        if isinstance(ev, dict) and ev.get("event") == "result":
            results.append(ev)
            continue
        lines.append(json.dumps(ev) if isinstance(ev, dict) else line)
    t = parse_transfer(group, "\n".join(lines))
    if results and len(results) >= nodes and not t.stage and not t.skipped:
        gbps = min(float(r.get("gbps") or 0) for r in results)
        lat = [x for x in (_number(r.get("latency_us")) for r in results) if x is not None]
        return Transfer(**{**t.__dict__, "gbps": gbps, "latency_us": max(lat) if lat else None,
                           "bytes": int(results[0].get("bytes") or 0),
                           "seconds": max(float(r.get("seconds") or 0) for r in results),
                           "verified": all(bool(r.get("verified")) for r in results)})
    if not t.stage and not t.skipped:
        return Transfer(**{**t.__dict__, "stage": "result", "gbps": None, "message":
                           f"{len(results)} of {nodes} nodes reported a result"})
    return t


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def transfer_fields(raw: dict[str, str]) -> dict:
    """HostFacts fields from a host's raw outputs."""
    transfers = []
    for name, text in sorted(raw.items()):
        if not (name.startswith(TRANSFER_PREFIX) and name.endswith(TRANSFER_SUFFIX)):
            continue
        decode = name[len(TRANSFER_PREFIX) : -len(TRANSFER_SUFFIX)]
        try:
            transfers.append(parse_transfer(decode, text))
        except (ValueError, TypeError, OverflowError) as exc:  # a hand-edited recording
            transfers.append(Transfer(decode, stage="recording", message=f"unreadable {name}: "
                                      f"{type(exc).__name__}"))
    groups = []
    for name, text in sorted(raw.items()):
        if name.startswith(GROUP_PREFIX) and name.endswith(TRANSFER_SUFFIX):
            group = name[len(GROUP_PREFIX) : -len(TRANSFER_SUFFIX)]
            try:
                groups.append(parse_group(group, text))
            except (ValueError, TypeError, OverflowError) as exc:
                groups.append(Transfer(group, stage="recording", message=f"unreadable {name}: "
                                       f"{type(exc).__name__}"))
    devices = parse_net_devices(raw[NET_DEVICES]) if NET_DEVICES in raw else None
    peermem = raw[PEERMEM].strip().splitlines()[-1:] if raw.get(PEERMEM, "").strip() else None
    return {"net_devices": devices, "peermem": None if peermem is None else
            peermem == ["loaded"], "transfers": tuple(transfers),
            "group_transfers": tuple(groups)}
