"""Preflight rules: (plan, facts) -> findings. Pure: no I/O."""

from __future__ import annotations

from typing import Any

from pdctl.check.fit import fit, model_of, weights_total
from pdctl.plan.model import Plan
from pdctl.plan.topology import plan_hosts
from pdctl.preflight import gpu as gpu_topic
from pdctl.preflight import host as h
from pdctl.preflight.cluster import cluster
from pdctl.preflight.facts import Facts
from pdctl.preflight.finding import Finding, Status, worst
from pdctl.preflight.gpu import host_topology
from pdctl.preflight.group import group_checks
from pdctl.preflight.hami import hami_library
from pdctl.preflight.transfer import group_transfers, rdma_limits, transfers

__all__ = ["Finding", "Status", "run_checks", "worst"]


def run_checks(
    plan: Plan, facts: Facts, hf_config: dict[str, Any] | None = None, transfer: bool = True
) -> tuple[Finding, ...]:
    """Every finding for the plan: hosts (or the cluster) first, then multi-node groups and
    the network preflight's transfers (`transfer=False`: none was run, say nothing of them),
    model fit last."""
    model, why = model_of(plan, hf_config)
    weights = weights_total(plan, model) if model is not None else None
    out: list[Finding] = []
    gpu = plan.spec.engine.device != "cpu"
    svc = plan.services
    if plan.target == "kubernetes":
        out += cluster(plan, facts.cluster)
    for host in plan_hosts(plan):
        index = next(i for i, x in enumerate(plan.spec.hosts) if x.name == host.name)
        hf = facts.host(host.name)
        found = h.reach(host, hf)
        if found or hf is None:
            out += found
            continue
        insts = [i for i in plan.instances if i.host is not None and i.host.name == host.name]
        if gpu and any(i.gpus for i in insts):
            out += gpu_topic.gpus(host, hf, insts, index)
            out += gpu_topic.driver(host, hf, plan)
            out += gpu_topic.mig(host, hf, insts)
            if not hf.gpu_error:
                out += host_topology(host, hf, plan, insts, index)
        out += h.rdma(host, hf, plan, insts)
        out += h.shm(host, hf, insts)
        out += h.runtime(host, hf, plan)
        out += hami_library(host, hf, plan, insts)
        out += h.disk(host, hf, weights)
        out += h.ports(host, hf, insts, tuple(s.port for s in svc if s.host.name == host.name),
                       h.spec_ports(plan, host.name))
    out += group_checks(plan, facts, model)
    out += rdma_limits(plan, facts)
    out += transfers(plan, facts, model, transfer)
    out += group_transfers(plan, facts, transfer)
    out += fit(plan, facts, model, why)
    return tuple(out)
