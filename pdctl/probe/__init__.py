"""Gather raw outputs from hosts (locally or over SSH, in parallel) and clusters. I/O only:
verdicts belong to pdctl.check, parsing to pdctl.facts."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from pdctl.facts import CLUSTER
from pdctl.plan.model import Plan
from pdctl.plan.topology import plan_hosts
from pdctl.preflight.gpu import NVML
from pdctl.preflight.run import Bounds, Options, Step, run_local, run_ssh
from pdctl.probe.command import commands
from pdctl.spec.model import Host

__all__ = ["CLUSTER", "Bounds", "Options", "gather", "hosts_to_probe", "is_local", "steps"]

LOCAL_ADDRESSES = ("localhost",)


def hosts_to_probe(plan: Plan) -> tuple[Host, ...]:
    return plan_hosts(plan)


def is_local(host: Host, options: Options) -> bool:
    return host.name in options.local or host.address in LOCAL_ADDRESSES


def _gpus(plan: Plan, host: Host) -> bool:
    return plan.spec.engine.device != "cpu" and bool(host.gpus)


def steps(plan: Plan, options: Options) -> dict[str, int]:
    """How many steps each host (and the cluster) takes, for a progress display."""
    out = {}
    for h in hosts_to_probe(plan):
        out[h.name] = len(commands(plan.spec, h, _gpus(plan, h))) + (1 if is_local(h, options)
                                                                      else 0)
    if options.transfer is not None:
        from pdctl.preflight.transfer import pairs

        for pair in pairs(plan):
            assert pair.prefill.host is not None
            out[pair.prefill.host.name] = out.get(pair.prefill.host.name, 0) + 1
    if plan.target == "kubernetes":
        out[CLUSTER] = 1
    return out


def gather(plan: Plan, options: Options, step: Step | None = None) -> dict[str, dict[str, str]]:
    """Raw outputs per host folder (and `_kubernetes` for a cluster)."""
    hosts = hosts_to_probe(plan)
    out: dict[str, dict[str, str]] = {}

    def one(host: Host) -> tuple[str, dict[str, str]]:
        cmds = commands(plan.spec, host, _gpus(plan, host))
        if is_local(host, options):  # NVML first (no driver is a recorded answer)
            from pdctl.preflight.gpu import dump

            raw = {NVML: dump()}
            if step:
                step(host.name, NVML)
            return host.name, raw | run_local(host.name, cmds, options, step)
        return host.name, run_ssh(host, cmds, options, step)

    if hosts:
        workers = max(1, min(options.concurrency, len(hosts)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for name, raw in pool.map(one, hosts):
                out[name] = raw
        from pdctl.preflight.group import reach_hosts

        local = lambda h: is_local(h, options)  # noqa: E731
        for name, files in reach_hosts(plan, options, out, local).items():
            out[name].update(files)  # multi-node groups: the nodes reach their leader
        if options.transfer is not None:
            from pdctl.preflight.transfer import transfer_groups, transfer_pairs

            moved = transfer_pairs(plan, options, options.transfer, out, local, step)
            for name, files in moved.items():
                out[name].update(files)  # phase 2: prefill to decode transfers
            for name, files in transfer_groups(plan, options, options.transfer, out,
                                               local).items():
                out[name].update(files)  # multi-node groups: all-to-all
    if plan.target == "kubernetes":
        from pdctl.preflight.cluster import gather as gather_cluster

        out[CLUSTER] = gather_cluster(options.kubeconfig, options.context)
        if step:
            step(CLUSTER, "cluster")
    return out
