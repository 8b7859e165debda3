"""Preflight for multi-node groups (plan/group.py): the nodes of one group must match (driver,
CUDA, GPU model, Python environment: a mismatch hangs or fails NCCL at start-up, see
docs/multinode.md), every headless node's host gets the per-host checks its leader's host gets
(GPUs, driver, shared memory, ports, runtime), and the RDMA devices a host names for NCCL must
exist with an ACTIVE port. The probes of probe/group.py add: one vLLM version on every node,
the locked-memory limit of RDMA hosts, and every node reaching its leader's rendezvous port
(reach.py). Pure: (plan, facts) -> findings."""

from __future__ import annotations

from typing import Any

from pdctl.check import host as h
from pdctl.check.reach import guards, memlock, reach, vllm_versions
from pdctl.plan.model import Instance, Plan
from pdctl.preflight.facts import Facts, HostFacts
from pdctl.preflight.finding import Finding

# Link bandwidths (GB/s, one direction, per host or per GPU for NVLink) the traffic figures
# use: NVLink 4 (H100/H200: 900 GB/s per GPU), 4 x 400 Gb/s InfiniBand NDR (one NIC per two
# GPUs, 200 GB/s per host), one 100 Gb/s Ethernet port (12.5 GB/s).
NVLINK_GBS, IB_GBS, ETHERNET_GBS = 900.0, 200.0, 12.5
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


def traffic(plan: Plan, leader: Instance, model: Any) -> list[Finding]:
    """The bytes per generated token that cross the network between a group's nodes, and what
    they cost at the link's bandwidth (docs/multinode.md). TP across nodes: every layer's two
    all-reduces (ring: 2(T-1)/T of the hidden state each); PP across nodes: the hidden state
    once per stage boundary; data parallel with expert parallel: the all-to-all dispatch and
    combine of each token's top-k experts in every MoE layer."""
    if model is None:
        return []
    section = getattr(plan.spec, leader.role)
    tp, pp = leader.tensor_parallel, getattr(section, "pipeline_parallel", 1)
    dp, nodes = getattr(section, "data_parallel", 1), 1 + len(leader.workers)
    act = 4 if plan.spec.model.dtype in ("float", "float32") else 2
    hosts = [n.host for n in (leader, *leader.workers) if n.host is not None]
    rdma = all(host.rdma_devices for host in hosts)
    link, link_name = (IB_GBS, "InfiniBand/RoCE") if rdma else (ETHERNET_GBS, "100 Gb/s Ethernet")
    if dp > 1:
        if not model.is_moe or not section.expert_parallel:
            return []
        moe_layers = model.layers - model.dense_layers
        per_token = 2 * model.experts_per_token * model.hidden * act * moe_layers
        top = model.experts_per_token
        what = f"EP all-to-all over {nodes} nodes ({moe_layers} MoE layers, top-{top})"
        crossing = per_token * (nodes - 1) / nodes
    else:
        per_node = tp * pp // nodes
        if tp > per_node:  # tensor-parallel groups span nodes
            per_token = 2 * 2 * (tp - 1) / tp * model.hidden * act * model.layers
            what = f"TP {tp} across {nodes} nodes (2 all-reduces x {model.layers} layers)"
            crossing = per_token
        else:
            crossing = model.hidden * act * (nodes - 1)
            what = f"PP across {nodes} nodes (the hidden state at {nodes - 1} stage boundaries)"
    ms = crossing / (link * 1e9) * 1e3
    nvlink_ms = crossing / (NVLINK_GBS * 1e9) * 1e3
    found = (
        f"{what}: {crossing / 1e6:.2f} MB per token between nodes = {ms:.3f} ms per token "
        f"at {link_name} ({link:g} GB/s) vs {nvlink_ms:.4f} ms over NVLink "
        f"({NVLINK_GBS / link:.0f}x slower)"
    )
    want = "no tensor-parallel traffic between nodes"
    if dp == 1 and tp > tp * pp // nodes:
        fix = (
            "keep TP inside a host (tensorParallel <= GPUs per node) and split across hosts "
            "with pipelineParallel"
            + ("" if rdma else "; give the hosts RDMA NICs (hosts[].rdmaDevices)")
        )
        return [Finding("WARN", "group.traffic", leader.name, found, want, fix)]
    return [Finding("PASS", "group.traffic", leader.name, found, want)]


def group_checks(plan: Plan, facts: Facts, model: Any = None) -> list[Finding]:
    """Every finding about multi-node groups on hosts ([] when there is none)."""
    if plan.target != "hosts":
        return []
    gpu = plan.spec.engine.device != "cpu"
    leaders = [i for i in plan.instances if i.workers]
    out: list[Finding] = []
    checked: set[str] = set()
    for leader in leaders:
        out += same_across(leader, facts, gpu)
        out += vllm_versions(leader, facts)
        out += reach(leader, facts)
        out += guards(leader, facts)
        out += traffic(plan, leader, model)
        for node in (leader, *leader.workers):
            assert node.host is not None
            hf = facts.host(node.host.name)
            if hf is None or hf.error:
                continue
            if node.host.name not in checked:
                checked.add(node.host.name)
                out += rdma_devices(node, hf)
                out += memlock(node, hf)
            if node.leader:
                out += worker_host(plan, node, hf, gpu)
    return out
