"""Topology rules: tensor-parallel groups on NVLink inside one NUMA node, P2P read/write
inside TP groups and between prefill/decode pairs on one host (NCCL transfer). Pure."""

from __future__ import annotations

from itertools import combinations, permutations

from pdctl.plan.model import Instance, Plan
from pdctl.plan.topology import best_group, describe, group_score
from pdctl.preflight.facts import HostFacts, is_nvlink
from pdctl.preflight.finding import Finding, gpu_list
from pdctl.spec.model import Host


def _numa(hf: HostFacts, gpus: tuple[int, ...]) -> str:
    nodes = sorted({g.numa for g in (hf.gpu(i) for i in gpus) if g is not None
                    and g.numa is not None})
    return "NUMA " + ",".join(map(str, nodes)) if nodes else ""


def suggested(host: Host, hf: HostFacts, instances: list[Instance]) -> dict[str, tuple[int, ...]]:
    """GPU sets a topology-aware placement gives the host's instances, in plan order."""
    free = [g for g in host.gpus if hf.gpu(g) is not None]
    out: dict[str, tuple[int, ...]] = {}
    for inst in instances:
        used = [g for g in host.gpus if g not in free]
        best = best_group(hf, free, len(inst.gpus), used) if inst.gpus else None
        if best is None:
            break
        out[inst.name] = tuple(sorted(best))
        free = [g for g in free if g not in best]
    return out


def tp_links(host: Host, hf: HostFacts, inst: Instance, best: tuple[int, ...] | None,
             index: int) -> list[Finding]:
    gpus = inst.gpus
    if len(gpus) < 2 or hf.gpus is None:
        return []
    want = "NVLink (NV#) between all GPUs of the group, one NUMA node"
    where = f"{host.name}/{inst.name}"
    level = describe(hf, gpus)
    if not level:
        return [Finding("WARN", "tp.nvlink", where,
                        f"GPUs {gpu_list(gpus)}: link levels " + hf.why_missing("topo-m.txt"),
                        want, "record nvidia-smi topo -m")]
    numa = _numa(hf, gpus)
    found = f"GPUs {gpu_list(gpus)}: {level}" + (f", {numa}" if numa else "")
    better = best is not None and group_score(hf, best)[:3] < group_score(hf, gpus)[:3]
    if better and best is not None:
        best_numa = _numa(hf, best)
        return [Finding("WARN", "tp.nvlink", where, found, want,
                        f"use GPUs {gpu_list(best)} ({describe(hf, best)}"
                        + (f", {best_numa}" if best_numa else "")
                        + f"): pdctl render --facts DIR, or reorder hosts[{index}].gpus")]
    if is_nvlink(level):
        return [Finding("PASS", "tp.nvlink", where, found, want)]
    return [Finding("WARN", "tp.nvlink", where, found, want,
                    f"no NVLink-joined set of {len(gpus)} GPUs on this host: all-reduce goes "
                    "over PCIe; prefer fewer GPUs per instance (more replicas) if the model fits")]


def _p2p_pairs(hf: HostFacts, pairs: list[tuple[int, int]]) -> tuple[list[str], list[str]]:
    bad, unknown = [], []
    for a, b in pairs:
        for kind, label in (("r", "read"), ("w", "write")):
            status = hf.p2p(a, b, kind)
            if not status:
                unknown.append(f"{a}->{b} {label}")
            elif status != "OK":
                bad.append(f"{a}->{b} {label} {status}")
    return bad, unknown


def p2p(host: Host, hf: HostFacts, where: str, gpus_a: tuple[int, ...],
        gpus_b: tuple[int, ...] | None, what: str) -> list[Finding]:
    if hf.gpus is None:
        return []
    if gpus_b is None:
        pairs = list(permutations(gpus_a, 2))
        label = f"GPUs {gpu_list(gpus_a)}"
    else:
        pairs = [(a, b) for a in gpus_a for b in gpus_b if a != b]
        pairs += [(b, a) for a, b in pairs]
        label = f"GPUs {gpu_list(gpus_a)} <-> {gpu_list(gpus_b)}"
    if not pairs:
        return []
    want = f"P2P read and write OK ({what})"
    bad, unknown = _p2p_pairs(hf, pairs)
    if bad:
        return [Finding("WARN", "p2p", where, f"{label}: " + "; ".join(bad[:4]), want,
                        "NCCL falls back to host memory: check ACS/IOMMU settings in the BIOS "
                        "and kernel, or the GPU virtualisation")]
    if unknown:
        return [Finding("WARN", "p2p", where, f"{label}: P2P status "
                        + hf.why_missing("topo-p2p-r.txt", "topo-p2p-w.txt"), want,
                        "record nvidia-smi topo -p2p r and w")]
    return [Finding("PASS", "p2p", where, f"{label}: read OK, write OK", want)]


def host_topology(host: Host, hf: HostFacts, plan: Plan, instances: list[Instance],
                  index: int) -> list[Finding]:
    out: list[Finding] = []
    best = suggested(host, hf, instances)
    for inst in instances:
        out += tp_links(host, hf, inst, best.get(inst.name), index)
    for inst in instances:
        if len(inst.gpus) > 1:
            out += p2p(host, hf, f"{host.name}/{inst.name}", inst.gpus, None,
                       "tensor-parallel all-reduce")
    d = plan.spec.disaggregation
    if d is not None and d.connector == "p2p-nccl":
        prefill = [i for i in instances if i.role == "prefill"]
        decode = [i for i in instances if i.role == "decode"]
        for p, q in ((p, q) for p in prefill for q in decode):
            out += p2p(host, hf, f"{host.name}/{p.name}+{q.name}", p.gpus, q.gpus,
                       "P2pNccl KV transfer on one host")
    return out


__all__ = ["combinations", "host_topology", "p2p", "tp_links"]
