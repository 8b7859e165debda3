"""The network preflight's verdicts (probe/transfer.py moves the bytes): one finding per
prefill host -> decode host pair: reached or not, and why (interface, GID, memlock, peermem,
firewall port, ...), the bandwidth and latency measured, against the KV bandwidth the plan
needs (KV bytes per request x the workload's request rate, the pair's share of it).
Pure: (plan, facts, model) -> findings."""

from __future__ import annotations

import re
from typing import Any

from pdctl.facts.transfer import Transfer, host_pairs, transport_of, uses_rdma
from pdctl.plan.model import Instance, Plan
from pdctl.preflight.facts import Facts
from pdctl.preflight.finding import Finding, Status
from pdctl.preflight.group import MEMLOCK_FLOOR_KIB

CHECK = "net.transfer"
GATHER = "run `pdctl preflight` against the hosts (without --no-transfer)"
MEMLOCK_FIX = (
    "raise the locked-memory limit to unlimited for the engines (`* soft memlock unlimited` "
    "and `* hard memlock unlimited` in /etc/security/limits.conf, LimitMEMLOCK=infinity for a "
    "service, `--ulimit memlock=-1` for docker)"
)
PEERMEM = r"GPU ?Direct RDMA Disabled|nvidia[_-]peermem"
PEERMEM_FIX = (
    "load the module (`sudo modprobe nvidia_peermem`) on both hosts, or use dmabuf "
    "(kernel >= 5.12 with the open NVIDIA driver)"
)
# (pattern in the agents' messages and logs, cause, fix): the transports' own words.
CAUSES: tuple[tuple[str, str, str], ...] = (
    (r"GID is NULL|GID index .*(invalid|out of range)|[Ff]ailed to (query|get) GID",
     "GID: the GID index names no address on the port",
     "pick a RoCE v2 GID index that exists (MC_GID_INDEX for Mooncake, NCCL_IB_GID_INDEX for "
     "NCCL, UCX_IB_GID_INDEX for UCX): see /sys/class/infiniband/DEV/ports/1/gids and "
     "gid_attrs/types"),
    # registering GPU memory without a peer-memory module fails with EFAULT
    (r"ibv_reg_mr.*Bad address|nvidia[_-]peermem",
     "peermem: GPUDirect RDMA unavailable (nvidia_peermem not loaded)", PEERMEM_FIX),
    (r"ibv_reg_mr|[Cc]annot allocate memory|RLIMIT_MEMLOCK|memlock",
     "memlock: memory registration failed (locked-memory limit)", MEMLOCK_FIX),
    (r"no socket interface found|network device '[^']*' is not available|No such device",
     "interface: the transport found no interface it was told to use",
     "name an interface the host has in NCCL_SOCKET_IFNAME / UCX_NET_DEVICES (`ip -br link`)"),
    (r"no usable transports|[Nn]o (suitable|available) transport|unreachable destination",
     "UCX: no transport in UCX_TLS reaches the other host over UCX_NET_DEVICES",
     "let UCX_TLS include a transport both hosts have (e.g. `tcp`, or `rc` with RDMA) and "
     "UCX_NET_DEVICES name a device on the route between them"),
    (r"No such image|image .* not found|[Uu]nable to find image",
     "image: the engine image is not on the host (preflight does not pull it)",
     "pull the pinned image on the host first (`docker pull IMAGE`), then rerun preflight"),
    (r"No available RNIC|Found 0 HCAs", "RDMA device: Mooncake found no usable RNIC",
     "name RDMA devices with an ACTIVE port (disaggregation.deviceName; `ibv_devices`, "
     "`ibv_devinfo`), check the container sees /dev/infiniband, or use protocol tcp"),
)


def pair_name(p: Instance, d: Instance) -> str:
    assert p.host is not None and d.host is not None
    return f"{p.host.name} -> {d.host.name}"


def cause(t: Transfer) -> tuple[str, str]:
    """(cause, fix) of a transfer that did not go through."""
    if t.skipped:
        if t.skipped.startswith("interface:"):
            return t.skipped, "name an interface the host has (`ip -br link`), or fix the spec"
        return f"not tried: {t.skipped}", "fix the host's SSH access first (host.reach)"
    text = "\n".join((t.message, *t.logs))
    for pattern, why, fix in CAUSES:
        if re.search(pattern, text):
            return f"{why} ({_quote(text, pattern)})", fix
    where = f"{t.address}:{t.port}"
    if t.stage == "connect" and t.errno == "ETIMEDOUT":
        return (f"firewall port: no answer from {where} (TCP port {t.port} dropped)",
                f"let TCP port {t.port} in on the decode host ({t.address}) and any firewall "
                "between, e.g. `sudo iptables -I INPUT -p tcp --dport "
                f"{t.port} -j ACCEPT` or `sudo firewall-cmd --add-port={t.port}/tcp`")
    if t.stage == "connect" and t.errno == "ECONNREFUSED":
        return (f"refused: {where} (a firewall rejects the port, or nothing listened)",
                f"let TCP port {t.port} in on the decode host")
    if t.stage == "connect" and t.errno in ("EHOSTUNREACH", "ENETUNREACH"):
        return (f"route: {where} unreachable from the prefill host ({t.errno})",
                "fix the route, or give the decode host an addressForPeers the prefill "
                "host reaches")
    if t.stage == "bind" and t.errno == "EADDRINUSE":
        return (f"port {t.port} is in use on the decode host",
                f"free port {t.port} (a running deployment holds it: then nothing to do)")
    if t.stage == "bind" and t.errno == "EADDRNOTAVAIL":
        return (f"address: {t.address} is not an address of the decode host",
                "set the decode host's addressForPeers to one of its own addresses")
    if t.stage == "import":
        return (f"not installed: {t.message}",
                "install the connector's package in the engine's environment (`pdctl up` "
                "does), or check hosts[].venv / condaEnv")
    if (t.stage == "transfer" and t.errno == "ETIMEDOUT") or (
        t.stage == "timeout" and t.connected
    ):
        sides = [f"prefill side: {t.phase}" if t.phase else "",
                 f"decode side: {t.listen_phase}" if t.listen_phase else ""]
        doing = f" ({'; '.join(x for x in sides if x)})" if any(sides) else ""
        return (f"no data: the side channel {where} answered but the transfer never "
                f"completed{doing}: the transport's own connections (ports of its own "
                "choosing) are blocked or misrouted",
                "let the transport's connections through the firewall between the hosts "
                "(not only the side-channel port), and check UCX_TLS / UCX_NET_DEVICES / "
                "NCCL_SOCKET_IFNAME name the route between them")
    if t.stage in ("timeout", "accept"):
        return (f"no transfer within the time bound ({t.side or 'agent'}: {t.message})",
                "check both hosts can reach each other on the connector's ports")
    if t.stage == "ssh":
        return (f"pdctl could not run the agents: {t.message}"[:400],
                "check the hosts answer over SSH (host.reach) and have room in /tmp")
    if t.stage == "result":
        what = f"no result: {t.message}"
    else:
        what = f"{t.stage} failed on the {t.side or 'agent'} side: {t.message or t.errno}"
    if t.logs:  # an agent that died without a word of its own (a crash in a library)
        what += f"; last log line: {t.logs[-1][:200]}"
    return what[:400], "see the recording's transfer file for the agents' logs"


def _quote(text: str, pattern: str) -> str:
    for line in text.splitlines():
        if re.search(pattern, line):
            return line.strip()[:200]
    return ""


def need_gbps(plan: Plan, model: Any, p: Instance, d: Instance) -> tuple[float | None, str]:
    """(GB/s this pair must carry, how it is reckoned) or (None, why unknown)."""
    wl = plan.spec.workload
    if wl is None or wl.requests_per_second is None:
        return None, "need unknown: set workload.requestsPerSecond"
    if model is None:
        return None, "need unknown: the model's shape is not known"
    from pdctl.capacity import kv_bytes_per_token

    spec = plan.spec
    per_token = kv_bytes_per_token(model, 1, 1, spec.model.kv_cache_dtype, spec.model.dtype)
    per_request = per_token * wl.prompt_tokens

    def count(role: str, host: str | None = None) -> int:
        return sum(1 for i in plan.instances if i.role == role and i.host is not None
                   and (host is None or i.host.name == host))

    assert p.host is not None and d.host is not None
    share = (count("prefill", p.host.name) / max(1, count("prefill"))) * (
        count("decode", d.host.name) / max(1, count("decode")))
    need = per_request * wl.requests_per_second * share / 1e9
    how = (f"KV {per_request / 2**20:.1f} MiB/request x {wl.requests_per_second:g} req/s"
           + (f" x {share:.2f} (this pair's share)" if share < 1 else ""))
    return need, how


def transfers(plan: Plan, facts: Facts, model: Any, run: bool = True) -> list[Finding]:
    """One finding per pair of probe/transfer.py's pairs."""
    if plan.target != "hosts" or plan.phase not in (2, 3) or plan.spec.disaggregation is None:
        return []
    transport = transport_of(plan.spec.disaggregation.connector)
    out: list[Finding] = []
    for p, d in host_pairs(plan.instances):
        assert p.host is not None and d.host is not None
        where = pair_name(p, d)
        need, how = need_gbps(plan, model, p, d)
        want = f">= {need:.3g} GB/s ({how})" if need is not None else f"reached ({how})"
        hf = facts.host(p.host.name)
        t = next((x for x in (hf.transfers if hf else ()) if x.decode == d.host.name), None)
        if t is None:
            if run:
                out.append(Finding("WARN", CHECK, where, f"{transport}: not measured", want,
                                   GATHER))
            continue
        if not t.reached:
            why, fix = cause(t)
            out.append(Finding("FAIL", CHECK, where, f"{t.transport or transport}: not "
                               f"reached: {why}", want, fix))
            continue
        found = (f"{t.transport}: {t.gbps:.3g} GB/s, latency {t.latency_us:.0f} us "
                 f"({t.bytes / 2**20:.0f} MiB in {t.seconds:.2f} s)"
                 if t.latency_us is not None else f"{t.transport}: {t.gbps:.3g} GB/s")
        if t.memory:  # sender -> listener: GPU memory where the engines register theirs
            found += f", {t.memory} memory"
        slow = _quote("\n".join(t.logs), PEERMEM)
        if not t.verified:
            out.append(Finding("FAIL", CHECK, where, found + "; the bytes did not arrive intact",
                               want, "see the recording's transfer file for the agents' logs"))
        elif need is not None and (t.gbps or 0) < need:
            fix = ("the link cannot carry the plan's KV traffic: use RDMA (protocol rdma, "
                   "UCX_TLS with rc), a faster interface, more decode hosts, or fewer req/s")
            out.append(Finding("FAIL", CHECK, where, found, want, fix))
        elif slow:
            out.append(Finding("WARN", CHECK, where, f"{found}; GPUDirect RDMA off: {slow}",
                               want, PEERMEM_FIX))
        else:
            out.append(Finding("PASS", CHECK, where, found, want))
    return out


def group_transfers(plan: Plan, facts: Facts, run: bool = True) -> list[Finding]:
    """One `net.alltoall` finding per multi-node group on hosts: every node exchanged bytes
    with every other over the group's backend (probe/group_transfer.py)."""
    if plan.target != "hosts":
        return []
    out: list[Finding] = []
    for leader in plan.instances:
        if not leader.workers or leader.host is None:
            continue
        nodes = 1 + len(leader.workers)
        want = f"all-to-all between the group's {nodes} nodes (its engines' backend)"
        hf = facts.host(leader.host.name)
        t = next((x for x in (hf.group_transfers if hf else ()) if x.decode == leader.name),
                 None)
        if t is None:
            if run:
                out.append(Finding("WARN", "net.alltoall", leader.name, "not measured", want,
                                   GATHER))
            continue
        if not t.reached:
            why, fix = cause(t)
            out.append(Finding("FAIL", "net.alltoall", leader.name,
                               f"{t.transport}: not reached: {why}", want, fix))
            continue
        found = (f"{t.transport}: {t.gbps:.3g} GB/s per node (slowest), latency "
                 f"{t.latency_us or 0:.0f} us ({t.bytes / 2**20:.0f} MiB in {t.seconds:.2f} s)")
        if not t.verified:
            out.append(Finding("FAIL", "net.alltoall", leader.name,
                               found + "; slices arrived wrong", want,
                               "see the recording's group-transfer file for the ranks' logs"))
        else:
            out.append(Finding("PASS", "net.alltoall", leader.name, found, want))
    return out


def rdma_limits(plan: Plan, facts: Facts) -> list[Finding]:
    """`net.rdma` per host of a pair whose KV transfer registers memory with RDMA NICs: the
    locked-memory limit (registration pins the KV buffers) and, with GPU KV buffers, the
    nvidia_peermem module (GPUDirect RDMA), read before any transfer."""
    dis = plan.spec.disaggregation
    if plan.target != "hosts" or plan.phase not in (2, 3) or dis is None:
        return []
    gpu = plan.spec.engine.device != "cpu" and dis.kv_buffer_device != "cpu"
    seen: dict[str, Instance] = {}
    for p, d in host_pairs(plan.instances):
        for inst in (p, d):
            seen.setdefault(inst.host.name, inst)
    out: list[Finding] = []
    for name, inst in seen.items():
        assert inst.host is not None
        if not uses_rdma(dis.protocol, dict(inst.env), inst.host.rdma_devices):
            continue
        hf = facts.host(name)
        if hf is None or hf.error:
            continue
        want = "ulimit -l unlimited" + ("; nvidia_peermem loaded (GPUDirect RDMA)" if gpu else "")
        kib = hf.memlock_kib
        parts = ["ulimit -l: " + ("not gathered" if kib is None else "unlimited" if kib < 0
                                  else f"{kib} KiB")]
        status: Status = "PASS"
        fix = ""
        if kib is None:
            status, fix = "WARN", GATHER
        elif kib >= 0:
            status = "FAIL" if kib < MEMLOCK_FLOOR_KIB else "WARN"
            fix = MEMLOCK_FIX
        if gpu and hf.peermem is not None:
            parts.append("nvidia_peermem " + ("loaded" if hf.peermem else "not loaded"))
            if not hf.peermem and status == "PASS":
                status, fix = "WARN", PEERMEM_FIX
        out.append(Finding(status, "net.rdma", name, "; ".join(parts), want, fix))
    return out
