"""The autoscaling replay scores (docs/autoscaling.md): the policy against fixed replicas on a
synthetic two-hour trace that shifts from prefill-heavy to decode-heavy traffic, with bursts.

    python benchmarks/autoscale_replay.py [SPEC] [--log]

SPEC (default examples/phase2-k8s-autoscale.yaml): its capacity plan models the instances;
the policy scales prefill and decode on each metric in turn (the spec's own rules first)."""

from __future__ import annotations

import sys
from pathlib import Path

from pdctl.autoscale.policy import RoleRule
from pdctl.autoscale.replay import best_fixed, from_capacity, replay, shifting_trace
from pdctl.plan import make_plan
from pdctl.plan.autoscale import explain_lines, targets
from pdctl.render.kube_autoscale import capacity
from pdctl.spec import load_text

BUDGET = 0.05  # the SLO-violation budget the policy must stay within


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    path = Path(args[0] if args else "examples/phase2-k8s-autoscale.yaml")
    spec, _ = load_text(path.read_text(), path.name)
    plan = make_plan(spec)
    cap = capacity(plan)
    roles = targets(plan, cap)
    model = from_capacity(cap, {t.role: t.gpus_per_instance for t in roles})
    trace = shifting_trace(model, cap.traffic.prompt_tokens, cap.traffic.output_tokens)
    max_gpus = spec.autoscaling.max_gpus if spec.autoscaling else None
    spec_replicas = {t.role: getattr(spec, t.role).replicas for t in roles}
    print(
        f"{path}: {len(trace) * 15 / 3600:.1f} h trace, TTFT budget {model.ttft_s:g} s, "
        f"max GPUs {max_gpus}, violation budget {BUDGET:.0%}"
    )
    for line in explain_lines(roles):
        print("  " + line)
    fixed = [replay(model, trace, spec_replicas, label="fixed (spec replicas)")]
    peak = {t.role: t.max_replicas for t in roles}
    fixed.append(replay(model, trace, peak, label="fixed (maxReplicas)"))
    bounds = {t.role: (t.min_replicas, t.max_replicas) for t in roles}
    best = best_fixed(model, trace, bounds, max_gpus, BUDGET)
    if best is not None:
        best.label = "best fixed " + best.label.removeprefix("fixed ")
        fixed.append(best)
    for s in fixed:
        print(s.line())
    start = {t.role: min(t.max_replicas, max(t.min_replicas, spec_replicas[t.role])) for t in roles}
    for metric in ("spec", "requestRate", "waiting", "kvUsage"):
        rules = []
        for t in roles:
            m = t.metric if metric == "spec" else metric
            value = t.target if metric == "spec" else t.figure(m).value  # type: ignore[union-attr]
            rules.append(
                RoleRule(
                    t.role,
                    m,
                    value,
                    t.min_replicas,
                    t.max_replicas,
                    t.gpus_per_instance,
                    t.scale_up_s,
                    t.scale_down_s,
                )
            )
        score = replay(model, trace, start, rules, max_gpus, label=f"policy ({metric})")
        print(score.line())
        if "--log" in argv:
            print("\n".join("    " + line for line in score.log))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
