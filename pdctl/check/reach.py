"""Preflight for multi-node groups from probe/group.py's probes: one vLLM version on every
node, the locked-memory limit on RDMA hosts, every node reaching its leader's rendezvous
port and every other node's group guard port. Pure: (instances, facts) -> findings."""

from __future__ import annotations

from typing import NamedTuple

from pdctl.plan.model import Instance
from pdctl.preflight.facts import Facts, HostFacts
from pdctl.preflight.finding import Finding, Status

GATHER = "run `pdctl preflight` against the hosts (or record their facts with `pdctl probe`)"
# RDMA registers (pins) host memory, which counts against RLIMIT_MEMLOCK; NCCL over InfiniBand
# and UCX (NIXL) are run with it unlimited (OFED's and NVIDIA's container guides:
# `ulimit -l unlimited`, `docker run --ulimit memlock=-1`). Below 1 GiB even NCCL's own IB
# buffers may not register; a finite limit above it is named as a risk.
MEMLOCK_FLOOR_KIB = 1 << 20

_WHY = {
    "ENETUNREACH": "no route to the leader's address",
    "EHOSTUNREACH": "the leader's address does not answer (no host, or a firewall rejects)",
    "ETIMEDOUT": "no answer: a firewall drops the packets, or the address is wrong",
    "ECONNREFUSED": "refused: a firewall rejects the port, or the leader's listener failed",
}


def _nodes(leader: Instance) -> tuple[Instance, ...]:
    return (leader, *leader.workers)


def vllm_versions(leader: Instance, facts: Facts) -> list[Finding]:
    """The vLLM of every node's runtime environment is one version (nodes of different
    versions fail or hang at the rendezvous: docs/multinode.md)."""
    seen: dict[str, str | None] = {}
    for node in _nodes(leader):
        assert node.host is not None
        hf = facts.host(node.host.name)
        seen[node.host.name] = None if hf is None or hf.error else hf.vllm_version
    if all(v is None for v in seen.values()):
        return []
    found = "; ".join(f"{host}: {v or 'not found'}" for host, v in seen.items())
    want = "one vLLM version on every node"
    if any(v is None for v in seen.values()):
        return [Finding("WARN", "group.vllm", leader.name, found, want, GATHER)]
    if "" in seen.values():
        fix = "install the pinned vLLM in every node's runtime environment (pdctl up does)"
        return [Finding("WARN", "group.vllm", leader.name, found, want, fix)]
    if len(set(seen.values())) > 1:
        fix = "install one vLLM version on every node: mixed versions fail at the rendezvous"
        return [Finding("FAIL", "group.vllm", leader.name, found, want, fix)]
    return [Finding("PASS", "group.vllm", leader.name, found, want)]


def memlock(node: Instance, hf: HostFacts) -> list[Finding]:
    """`ulimit -l` where the host names RDMA devices for NCCL."""
    assert node.host is not None
    if not node.host.rdma_devices:
        return []
    where, want = node.host.name, "locked memory (ulimit -l) unlimited for RDMA"
    kib = hf.memlock_kib
    if kib is None:
        return [Finding("WARN", "group.memlock", where, "ulimit -l: not gathered", want, GATHER)]
    # Where probe/group.py measured it: the context the engines will run in (named when that
    # is a systemd unit, whose limit is not the login shell's).
    unit = hf.memlock_where not in ("", "the login shell")
    ctx = f" (in {hf.memlock_where})" if unit else ""
    if kib < 0:
        return [Finding("PASS", "group.memlock", where, f"ulimit -l: unlimited{ctx}", want)]
    found = f"ulimit -l: {kib} KiB{ctx}"
    status: Status = "FAIL" if kib < MEMLOCK_FLOOR_KIB else "WARN"
    fix = memlock_fix(hf.memlock_where, where)
    return [Finding(status, "group.memlock", where, found, want, fix)]


def memlock_fix(context: str, host: str) -> str:
    """How to raise the limit where the engines run: limits.conf applies to login sessions (and
    nohup'd engines), never to systemd services; a unit's LimitMEMLOCK=infinity (pdctl's units
    say it) is capped by its manager's hard limit."""
    if context.startswith("a user unit"):
        return (
            "raise the user manager's hard limit on " + host + ": `LimitMEMLOCK=infinity` in a "
            "drop-in for user@.service (`sudo systemctl edit user@.service`), then restart "
            "user@UID.service or reboot; or run pdctl as root (system units)"
        )
    if context.startswith("a system unit"):
        return (
            "systemd itself cannot raise it on " + host + " (PID 1 without CAP_SYS_RESOURCE, "
            "e.g. in a container): raise the hard limit of the machine or container (`docker "
            "run --ulimit memlock=-1`) that runs it"
        )
    return (
        "set `* soft memlock unlimited` and `* hard memlock unlimited` in "
        "/etc/security/limits.conf (or LimitMEMLOCK=infinity for a service) on " + host
    )


def reach(leader: Instance, facts: Facts) -> list[Finding]:
    """Every other node connected to a short-lived listener on its leader's rendezvous port
    (probe/group.py): the route and every firewall between them let that port through, and
    the port is free on the leader."""
    port = Meeting(
        "group.reach", leader.name, "rendezvousPort", "the group's rendezvous", "the leader", True
    )
    return met(port, leader, leader.workers, facts)


def guards(leader: Instance, facts: Facts) -> list[Finding]:
    """Each node's group guard port (plan/guard.py) reached from every other node of the
    group, and free on the node's host. Only where the rendezvous port was probed (a recording
    made before guards has no guard probes: group.reach says `not probed` already)."""
    assert leader.host is not None
    lf = facts.host(leader.host.name)
    if not any(x.group == leader.name for x in (lf.listen if lf and not lf.error else ())):
        return []
    nodes = (leader, *leader.workers)
    out: list[Finding] = []
    for node in nodes:
        if "guard" in dict(node.extra_ports):
            label = f"{node.name}/guard"
            guard = Meeting("group.guard", label, "guardPort", "its group guard", node.name, False)
            out += met(guard, node, tuple(n for n in nodes if n is not node), facts)
    return out


class Meeting(NamedTuple):
    check: str  # the finding's check id
    label: str  # the probes' group label
    field: str  # the spec field that moves the port
    what: str  # what listens there
    to: str  # how a finding names the node that listens ("the leader", a node's name)
    nccl_route: bool  # WARN when the route leaves off the node's networkInterface (NCCL's)


def met(m: Meeting, target: Instance, nodes: tuple[Instance, ...], facts: Facts) -> list[Finding]:
    """Findings of one listener on `target`'s host and the connects of `nodes` to it."""
    assert target.host is not None
    there = target.host.name
    tf = facts.host(there)
    listens = [x for x in (tf.listen if tf and not tf.error else ()) if x.group == m.label]
    out: list[Finding] = []
    tried = [
        r
        for node in nodes
        if node.host is not None and (hf := facts.host(node.host.name)) and not hf.error
        for r in hf.reach
        if r.group == m.label
    ]
    for x in listens:
        if not x.error:
            continue
        want = f"port {x.port} free on {there} for {m.what}"
        fix = f"free port {x.port} on {there}, or set {m.field}"
        if tried and all(r.result == "connected" for r in tried):
            # something answers there already: this group running (preflight after up)?
            fix = f"if {target.name} is running already, nothing to do; else {fix}"
            out.append(Finding("WARN", m.check, there, x.error, want, fix))
        else:
            out.append(Finding("FAIL", m.check, there, x.error, want, fix))
    for node in nodes:
        assert node.host is not None
        hf = facts.host(node.host.name)
        tries = [r for r in (hf.reach if hf and not hf.error else ()) if r.group == m.label]
        where = node.host.name
        if not tries:
            want = f"{where} reaches {target.name}'s {m.what} port"
            out.append(Finding("WARN", m.check, where, "not probed", want, GATHER))
            continue
        for r in tries:
            want = f"{where} connects to {m.to} {r.address}:{r.port}"
            via = f" (route: {r.route})" if r.route else ""
            found = f"{r.result}{via}"
            if r.result != "connected":
                why = _WHY.get(r.result, r.result).replace("the leader", m.to)
                fix = (
                    f"{why}: let {where} reach {r.address} on TCP {r.port} (firewall, routes), "
                    f"or give {there} an addressForPeers that {where} reaches"
                )
                out.append(Finding("FAIL", m.check, where, found, want, fix))
                continue
            ifname = node.host.network_interface
            if m.nccl_route and ifname and r.device and r.device != ifname:
                fix = (
                    f"the route to the leader leaves through {r.device}, but NCCL/Gloo use "
                    f"{ifname} (networkInterface): use the leader's address on {ifname}'s "
                    "network as its addressForPeers, or fix networkInterface"
                )
                out.append(Finding("WARN", m.check, where, found, want, fix))
                continue
            out.append(Finding("PASS", m.check, where, found, want))
    return out
