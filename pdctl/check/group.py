"""Preflight for multi-node groups (plan/group.py): the nodes of one group must match (driver,
CUDA, GPU model, Python environment: a mismatch hangs or fails NCCL at start-up, see
docs/multinode.md), every headless node's host gets the per-host checks its leader's host gets
(GPUs, driver, shared memory, ports, runtime), and the RDMA devices a host names for NCCL must
exist with an ACTIVE port. Pure: (plan, facts) -> findings."""

from __future__ import annotations

from pdctl.check import host as h
from pdctl.check.finding import Finding
from pdctl.facts.model import Facts, HostFacts
from pdctl.plan.model import Instance, Plan

GATHER = "run `pdctl preflight` against the hosts (or record their facts with `pdctl probe`)"


def _gpu_model(hf: HostFacts, gpus: tuple[int, ...]) -> str:
    names = sorted({g.name for g in hf.gpus or () if not gpus or g.index in gpus})
    return ", ".join(names)


def _python(hf: HostFacts) -> str:
    return (hf.venv or "").strip().splitlines()[0] if hf.venv else ""


def same_across(leader: Instance, facts: Facts, gpu: bool) -> list[Finding]:
    """One finding per property: equal on every node of the group, or FAIL naming each."""
    nodes = (leader, *leader.workers)
    known: list[tuple[Instance, HostFacts]] = []
    for node in nodes:
        assert node.host is not None
        hf = facts.host(node.host.name)
        if hf is None or hf.error:
            return [
                Finding(
                    "WARN",
                    "group.same",
                    leader.name,
                    f"no facts from {node.host.name}",
                    "facts from every node of the group",
                    GATHER,
                )
            ]
        known.append((node, hf))
    props = [("Python environment", lambda n, f: _python(f))]
    if gpu:
        props = [
            ("NVIDIA driver", lambda n, f: f.driver),
            ("CUDA version", lambda n, f: f.cuda),
            ("GPU model", lambda n, f: _gpu_model(f, n.gpus)),
            *props,
        ]
    out = []
    for what, value in props:
        seen = {n.host.name: value(n, f) for n, f in known if n.host is not None}
        values = set(seen.values())
        found = "; ".join(f"{host}: {v or 'unknown'}" for host, v in seen.items())
        want = f"one {what} on every node"
        if "" in values:
            out.append(Finding("WARN", "group.same", leader.name, found, want, GATHER))
        elif len(values) > 1:
            fix = (
                f"give every node of {leader.name} the same {what}: nodes that differ hang "
                "or fail when NCCL/Gloo first connect"
            )
            out.append(Finding("FAIL", "group.same", leader.name, found, want, fix))
        else:
            out.append(Finding("PASS", "group.same", leader.name, found, want))
    return out


def rdma_devices(node: Instance, hf: HostFacts) -> list[Finding]:
    """The host's `rdmaDevices` (NCCL_IB_HCA) exist with an ACTIVE port."""
    assert node.host is not None
    names = node.host.rdma_devices
    if not names:
        return []
    want = f"RDMA devices {', '.join(names)} with an ACTIVE port (NCCL_IB_HCA)"
    where = node.host.name
    if hf.rdma_devices is None:
        return [Finding("WARN", "group.rdma", where, "RDMA devices: not gathered", want, GATHER)]
    active = sorted({p.device for p in hf.rdma_ports if p.state == "ACTIVE"})
    missing = [n for n in names if n not in active]
    found = (
        f"devices {', '.join(hf.rdma_devices)}; active: {', '.join(active) or 'none'}"
        if hf.rdma_devices
        else "no RDMA devices (/sys/class/infiniband empty)"
    )
    if missing:
        fix = f"bring {', '.join(missing)} up, or drop it from hosts[].rdmaDevices"
        return [Finding("FAIL", "group.rdma", where, found, want, fix)]
    return [Finding("PASS", "group.rdma", where, found, want)]


def worker_host(plan: Plan, node: Instance, hf: HostFacts, gpu: bool) -> list[Finding]:
    """The per-host checks for a headless node (plan.instances holds leaders only)."""
    assert node.host is not None
    index = next(i for i, x in enumerate(plan.spec.hosts) if x.name == node.host.name)
    out: list[Finding] = []
    if gpu and node.gpus:
        out += h.gpus(node.host, hf, [node], index)
        out += h.driver(node.host, hf, plan)
        out += h.mig(node.host, hf, [node])
    out += h.shm(node.host, hf, [node])
    out += h.runtime(node.host, hf, plan)
    out += h.ports(node.host, hf, [node])
    return out


def group_checks(plan: Plan, facts: Facts) -> list[Finding]:
    """Every finding about multi-node groups on hosts ([] when there is none)."""
    if plan.target != "hosts":
        return []
    gpu = plan.spec.engine.device != "cpu"
    leaders = [i for i in plan.instances if i.workers]
    out: list[Finding] = []
    checked: set[str] = set()
    for leader in leaders:
        out += same_across(leader, facts, gpu)
        for node in (leader, *leader.workers):
            assert node.host is not None
            hf = facts.host(node.host.name)
            if hf is None or hf.error:
                continue
            if node.host.name not in checked:
                checked.add(node.host.name)
                out += rdma_devices(node, hf)
            if node.leader:
                out += worker_host(plan, node, hf, gpu)
    return out
