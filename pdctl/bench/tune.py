"""`pdctl tune`: rules that turn a bench report into proposed spec changes (pure).

Each rule reads the heaviest step of the report (the one that moved the most output tokens)
and the spec, and proposes one change with its evidence. The rules and their sources are in
docs/bench.md ("tune's rules"). Proposals are an overlay (camelCase keys, as `--overlay`
takes); nothing is applied."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from pdctl.errors import PdctlError

KV_FULL = 0.9  # a role whose KV cache peaked above this is memory-bound
IDLE = 0.25  # a role whose running peak stayed under this share of its batch cap idles
SLOW = 2.0  # measured over predicted beyond this: the plan and the deployment disagree
CPU_KV_SPACE = "VLLM_CPU_KVCACHE_SPACE"  # GiB of RAM a CPU engine gives its KV cache
# what `pdctl tune` does for an `engine.device: cpu` spec (docs/bench.md, "tune's rules")
CPU_NOTE = ("engine.device cpu: no GPU plan; the rules on queues, batch caps and chunk size "
            "apply, KV pressure doubles VLLM_CPU_KVCACHE_SPACE where engine.env sets it; no TP "
            "or slices-per-GPU proposals and no plan-vs-measured notes")


def _positive(value: Any) -> bool:
    try:
        return value is not None and float(value) > 0
    except ValueError:
        return False


@dataclass(frozen=True)
class Proposal:
    path: tuple[str, ...]  # spec keys (camelCase), e.g. ("decode", "replicas")
    value: Any
    was: Any
    rule: str
    evidence: str


def heaviest(report: dict[str, Any]) -> dict[str, Any] | None:
    steps = report.get("steps") or []
    return max(steps, key=lambda s: s["measured"].get("outputThroughput") or 0, default=None)


def role_load(step: dict[str, Any], role: str) -> dict[str, float]:
    """A role's peaks over the step: waiting, running share of max-num-seqs, KV usage, and
    its preemptions."""
    out = {"waiting": 0.0, "busy": 0.0, "kv": 0.0, "preemptions": 0.0, "instances": 0}
    for row in step["metrics"].get("instances", []):
        if row.get("role") != role or row.get("error"):
            continue
        peak = row.get("peak") or {}
        out["instances"] += 1
        out["waiting"] = max(out["waiting"], peak.get("waiting", row.get("waiting") or 0))
        out["kv"] = max(out["kv"], peak.get("kv_usage", row.get("kv_usage") or 0))
        cap = row.get("max_num_seqs") or 256  # vLLM's default batch cap (0.23.0 on)
        out["busy"] = max(out["busy"], peak.get("running", row.get("running") or 0) / cap)
        out["preemptions"] += row.get("preemptions") or 0
    return out


def propose(spec: dict[str, Any], report: dict[str, Any]) -> list[Proposal]:
    """The proposals for `spec` (its data, camelCase keys) from a bench `report`."""
    step = heaviest(report)
    if step is None:
        return []
    out: list[Proposal] = []
    slo = report.get("workload", {})
    m = step["measured"]
    ttft, tpot = (m.get("ttftMs") or {}).get("p90"), (m.get("tpotMs") or {}).get("p90")
    late_ttft = slo.get("ttftMs") is not None and ttft is not None and ttft > slo["ttftMs"]
    late_tpot = slo.get("tpotMs") is not None and tpot is not None and tpot > slo["tpotMs"]
    roles = ("prefill", "decode") if spec.get("phase", 0) in (2, 3) else ("serve",)
    load = {r: role_load(step, r) for r in roles}

    def saturated(r: str) -> str | None:
        x = load[r]
        if x["waiting"] > 0:
            return f"{r} queued up to {x['waiting']:g} requests"
        if x["kv"] >= KV_FULL:
            return f"{r} KV cache peaked at {x['kv']:.0%}"
        return None

    def idle(r: str) -> bool:
        x = load[r]
        return x["waiting"] == 0 and x["busy"] < IDLE and x["kv"] < KV_FULL / 2

    def replicas(r: str) -> int:
        return int((spec.get(r) or {}).get("replicas", 1))

    if len(roles) == 2:
        # the client's first token comes through decode: a queue there delays TTFT too, so
        # a late TTFT is prefill's only while decode is not saturated
        pairs = (("prefill", "decode", late_ttft and saturated("decode") is None),
                 ("decode", "prefill", late_tpot))
        for busy, other, late in pairs:
            why = saturated(busy)
            if why is None and late:
                why = f"p90 {'TTFT' if busy == 'prefill' else 'TPOT'} over the SLO"
            if why is None:
                continue
            if idle(other) and replicas(other) > 1:
                evidence = (f"{why} while {other} idled (running peak "
                            f"{load[other]['busy']:.0%} of max-num-seqs): move one instance")
                out.append(Proposal((other, "replicas"), replicas(other) - 1, replicas(other),
                                    "P:D ratio", evidence))
            elif idle(other):
                evidence = f"{why}; {other} idled but has a single instance to keep"
            else:
                evidence = f"{why}; {other} was busy too: no instance to move"
            out.append(Proposal((busy, "replicas"), replicas(busy) + 1, replicas(busy),
                                "P:D ratio" if idle(other) else "replicas", evidence))
    else:
        why = saturated("serve") or ("p90 TTFT or TPOT over the SLO" if late_ttft or late_tpot
                                     else None)
        if why:
            out.append(Proposal(("serve", "replicas"), replicas("serve") + 1, replicas("serve"),
                                "replicas", why))

    engine = spec.get("engine") or {}
    cpu = engine.get("device") == "cpu"
    for r in roles:
        x, sec = load[r], (spec.get(r) or {})
        space = (engine.get("env") or {}).get(CPU_KV_SPACE)
        if cpu and x["preemptions"] > 0 and x["kv"] >= KV_FULL and _positive(space):
            # a CPU engine's KV cache is VLLM_CPU_KVCACHE_SPACE GiB of RAM; no GPU to add
            doubled = f"{float(str(space)) * 2:g}"
            out.append(Proposal(("engine", "env", CPU_KV_SPACE), doubled, space, "CPU KV space",
                                f"{r} preempted {x['preemptions']:g} requests with its KV cache "
                                f"at {x['kv']:.0%}: twice the RAM for KV (the host needs it)"))
        elif not cpu and x["preemptions"] > 0 and x["kv"] >= KV_FULL:
            tp = int(sec.get("tensorParallel", 1))
            out.append(Proposal((r, "tensorParallel"), tp * 2, tp, "TP",
                                f"{r} preempted {x['preemptions']:g} requests with its KV cache "
                                f"at {x['kv']:.0%}: twice the GPUs hold more than twice the KV"))
        cap = sec.get("maxNumSeqs")
        if cap and x["busy"] >= 1.0 and x["waiting"] > 0 and x["kv"] < KV_FULL / 2:
            out.append(Proposal((r, "maxNumSeqs"), int(cap) * 2, cap, "max-num-seqs",
                                f"{r} ran its cap of {cap} with {x['waiting']:g} waiting and "
                                f"the KV cache at {x['kv']:.0%}: the cap, not memory, binds"))
        itl = m.get("itlMs") or {}
        if (r in ("serve", "decode") and late_tpot and itl.get("p99") and itl.get("p50")
                and itl["p99"] > 3 * itl["p50"]):
            mbt = int(sec.get("maxNumBatchedTokens") or 8192)
            if mbt > 512:
                out.append(Proposal((r, "maxNumBatchedTokens"), mbt // 2, sec.get(
                    "maxNumBatchedTokens"), "max-num-batched-tokens",
                    f"ITL p99 {itl['p99']:.1f} ms is over 3x p50 {itl['p50']:.1f} ms with TPOT "
                    "over the SLO: long prefill chunks stall decode steps; halve the chunk"))
    share = (spec.get("decode") or {}).get("share")
    if spec.get("phase") == 3 and share is not None and not cpu:
        per = int(share.get("perGpu", 2))
        d = load["decode"]
        if d["kv"] >= KV_FULL or d["preemptions"] > 0:
            out.append(Proposal(("decode", "share", "perGpu"), max(1, per - 1), per,
                                "slices per GPU", f"decode slices ran out of KV (peak "
                                f"{d['kv']:.0%}, {d['preemptions']:g} preemptions)"))
        elif idle("decode") and per < 16:
            out.append(Proposal(("decode", "share", "perGpu"), per + 1, per, "slices per GPU",
                                f"decode slices idled (running peak {d['busy']:.0%}, KV "
                                f"{d['kv']:.0%}): pack one more per GPU"))
    return _merge(out)


# `rank(load, ttft_scale, tpot_scale)`: the spec's engine settings ranked by the speed model at
# a load, its latency targets held against the model's figures times the scales
# (pdctl.capacity.search.search, planned by the caller)
Rank = Callable[[Any, float, float], list[Any]]
MIN_GAIN = 1.03  # a settings change must promise this much more goodput (model noise)


def step_load(step: dict[str, Any]) -> Any:
    """The load of a report's step as `plan --load` takes it (None: all at once)."""
    from pdctl.capacity.atload import LoadSpec

    label = str(step.get("load", ""))
    if label.startswith("concurrency "):
        return LoadSpec(concurrency=int(label.split()[1]))
    if label.startswith("rate ") and label.endswith("/s"):
        rate = float(label[5:-2])
        return LoadSpec(rate=rate) if rate > 0 and rate != float("inf") else None
    return None


def _batch_role(spec: dict[str, Any]) -> str:
    """The role whose engines hold the batch: decode with P/D (phases 2 and 3), else serve."""
    return "decode" if spec.get("phase", 0) in (2, 3) else "serve"


def settings(spec: dict[str, Any], report: dict[str, Any], rank: Rank) -> Proposal | None:
    """The engine settings the speed model ranks first at the heaviest step's load, once its
    TTFT and TPOT are scaled to what this bench measured for the spec's own settings (the
    step's measured / predicted); None where the spec's settings stay first, the gain is
    under MIN_GAIN, or the report has no latency target, no prediction or no such load."""
    from pydantic.alias_generators import to_camel

    from pdctl.capacity.search import AS_SPEC, NUMERICS, change_of

    step = heaviest(report)
    slo = report.get("workload") or {}
    if step is None or (slo.get("ttftMs") is None and slo.get("tpotMs") is None):
        return None
    load, ratio = step_load(step), step.get("ratio") or {}
    if load is None or not ratio:
        return None
    scale = (float(ratio.get("ttftMs") or 1.0), float(ratio.get("tpotMs") or 1.0))
    ranked = rank(load, *scale)
    own = next((t for t in ranked if t.label == AS_SPEC), None)
    best = ranked[0] if ranked else None
    if best is None or own is None or best is own or not best.goodput:
        return None
    base = own.goodput or 0.0
    if base and best.goodput < base * MIN_GAIN:
        return None
    change = change_of(best.label)
    if change is None:
        return None
    field, value = change
    role = _batch_role(spec)
    if field.startswith("model."):
        path: tuple[str, ...] = ("model", to_camel(field.removeprefix("model.")))
        was = (spec.get("model") or {}).get(path[1], "auto")
    else:
        path = (role, to_camel(field))
        was = (spec.get(role) or {}).get(path[1])
    evidence = (
        f"at {load.label} the speed model, scaled to this bench (TTFT x{scale[0]:.2f}, TPOT "
        f"x{scale[1]:.2f} of its prediction), gives {best.goodput:.3g} requests/s within the "
        f"SLOs against {base:.3g} for the spec's settings"
        + ("; changes numerics (vLLM's fp8 KV scales)" if best.label == NUMERICS else "")
    )
    return Proposal(path, value, was, "engine settings", evidence)


def _merge(found: list[Proposal]) -> list[Proposal]:
    """One proposal per path: the first rule that set it wins."""
    seen: dict[tuple[str, ...], Proposal] = {}
    for p in found:
        seen.setdefault(p.path, p)
    return list(seen.values())


def notes(report: dict[str, Any], cpu: bool = False) -> list[str]:
    """Where the plan and the measurement disagree by more than SLOW (either way); none for a
    CPU engine (`cpu`): the plan's figures are a GPU's, whatever an older report recorded."""
    step = heaviest(report)
    if step is None or cpu:
        return []
    out = []
    for fig, r in (step.get("ratio") or {}).items():
        if r and (r > SLOW or r < 1 / SLOW):
            out.append(f"{fig}: measured {r:g}x what `pdctl plan` predicted ({step['load']})")
    return out


def overlay(proposals: list[Proposal]) -> dict[str, Any]:
    """The proposals as an overlay document (what `--overlay` merges)."""
    doc: dict[str, Any] = {}
    for p in proposals:
        node = doc
        for key in p.path[:-1]:
            node = node.setdefault(key, {})
        node[p.path[-1]] = p.value
    return doc


def tune(spec: dict[str, Any], report: dict[str, Any],
         render: Callable[[str | None], str], rank: Rank | None = None
         ) -> tuple[dict[str, Any], str]:
    """`pdctl tune`'s result and its overlay as YAML: the proposals, the notes, and what the
    overlay changes in the rendered deployment (`render(overlay)`: SPEC's bundle rendered
    with the overlay's text, or without it for None), or why SPEC with it does not plan.
    `rank` (GPU specs): the speed model's ranking of engine settings (`settings`), proposed
    after the rules, where no rule already changed the batch role's engine (a ranking is of
    single changes to the spec's own settings)."""
    cpu = (spec.get("engine") or {}).get("device") == "cpu"
    found = propose(spec, report)
    role = _batch_role(spec)
    engine_fields = ("maxNumSeqs", "maxNumBatchedTokens", "tensorParallel", "share")
    if rank is not None and not cpu and not any(
            p.path[0] == role and p.path[1] in engine_fields for p in found):
        picked = settings(spec, report, rank)
        if picked is not None:
            found.append(picked)
    doc = overlay(found)
    text = yaml.safe_dump(doc, sort_keys=False) if doc else ""
    diff: list[str] = []
    unplanned = None  # why SPEC with the overlay does not plan (e.g. more GPUs than hosts)
    if doc:
        before = render(None)
        try:
            after = render(text)
        except PdctlError as exc:
            unplanned = exc.line()
        else:
            diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), "rendered",
                                             "rendered with the overlay", lineterm="", n=1))
    return {
        "proposals": [{"path": ".".join(p.path), "from": p.was, "to": p.value,
                       "rule": p.rule, "evidence": p.evidence} for p in found],
        "overlay": doc, "notes": notes(report, cpu), "diff": diff, "doesNotPlan": unplanned,
        "cpu": CPU_NOTE if cpu else None,
    }, text
