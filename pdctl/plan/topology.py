"""Topology-aware GPU choice from preflight facts: tensor-parallel groups inside one NVLink
island and one NUMA node; a new instance next to (NVLink) the GPUs already placed on the host,
so prefill/decode pairs on one host transfer over NVLink. Pure and deterministic."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from math import comb

from pdctl.plan.model import Plan
from pdctl.plan.place import Chooser, first_free
from pdctl.preflight.facts import Facts, HostFacts, is_nvlink, link_rank
from pdctl.spec.model import Host

MAX_CANDIDATES = 20_000


Links = dict[tuple[int, int], str]


def link_map(facts: HostFacts) -> Links:
    out: Links = {}
    for a, b, level in facts.links:
        out[(a, b)] = out[(b, a)] = level
    return out


def group_score(facts: HostFacts, gpus: Sequence[int], used: Sequence[int] = (),
                links: Links | None = None) -> tuple:
    """Sort key for a GPU set (smaller is better): all NVLink, one NUMA node, the worst link,
    NVLink neighbours among `used` GPUs, then the lowest indices."""
    lm = links if links is not None else link_map(facts)
    levels = [lm.get((a, b), "") for a, b in combinations(gpus, 2)]
    all_nvlink = all(is_nvlink(lv) for lv in levels)
    worst = max((link_rank(lv) for lv in levels), default=(0, 0))
    numa = {g.numa for g in (facts.gpu(i) for i in gpus) if g is not None}
    near = sum(1 for a in gpus for b in used if is_nvlink(lm.get((a, b), "")))
    return (not all_nvlink, len(numa) > 1, worst, -near, tuple(sorted(gpus)))


def _greedy(facts: HostFacts, free: Sequence[int], count: int, used: Sequence[int],
            links: Links) -> list[tuple[int, ...]]:
    """One grown set per seed GPU: add the GPU whose worst link into the set is best."""
    out = []
    for seed in free:
        group = [seed]
        while len(group) < count:
            rest = [g for g in free if g not in group]
            group.append(min(rest, key=lambda g: (
                max(link_rank(links.get((g, x), "")) for x in group), g)))
        out.append(tuple(sorted(group)))
    return out


def best_group(facts: HostFacts, free: Sequence[int], count: int,
               used: Sequence[int] = ()) -> tuple[int, ...] | None:
    """The best `count` GPUs out of `free` (None when there are too few)."""
    if count > len(free) or count <= 0:
        return None
    if count == 1 and not used:
        return (free[0],)
    links = link_map(facts)
    if comb(len(free), count) <= MAX_CANDIDATES:
        sets: list[tuple[int, ...]] = list(combinations(free, count))
    else:
        sets = _greedy(facts, free, count, used, links)
    return min(sets, key=lambda s: group_score(facts, s, used, links))


def describe(facts: HostFacts, gpus: Sequence[int]) -> str:
    """'NV18' / 'SYS' ...: the worst link inside a GPU set ('' for one GPU or unknown)."""
    levels = [facts.link(a, b) for a, b in combinations(gpus, 2)]
    if not levels or any(not lv for lv in levels):
        return ""
    return max(levels, key=link_rank)


class TopologyChooser:
    """A `Chooser` for make_plan(choose=...): uses facts where a host has them, else the
    listed order (first_free)."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts

    def __call__(self, host: Host, free: Sequence[int], count: int) -> tuple[int, ...]:
        hf = self.facts.host(host.name)
        if hf is None or not hf.links:
            return first_free(host, free, count)
        used = [g for g in host.gpus if g not in free]
        chosen = best_group(hf, list(free), count, used)
        return tuple(sorted(chosen)) if chosen is not None else first_free(host, free, count)


def chooser(facts: Facts) -> Chooser:
    return TopologyChooser(facts)


def plan_hosts(plan: Plan) -> tuple[Host, ...]:
    """The hosts a preflight looks at: those with instances or services (router)."""
    if plan.on_kubernetes:
        return ()
    used = {h.name for h in plan.hosts_used()} | {s.host.name for s in plan.services}
    return tuple(h for h in plan.spec.hosts if h.name in used)
