"""The replay test bed: the policy against fixed replicas on the shifting trace, instances
modelled by the example's capacity plan (pdctl/autoscale/replay.py)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pdctl.autoscale.policy import RoleRule
from pdctl.autoscale.replay import Model, best_fixed, from_capacity, replay, shifting_trace
from pdctl.plan import make_plan
from pdctl.plan.autoscale import RoleTarget, targets
from pdctl.render.kube_autoscale import capacity
from pdctl.spec import load_text
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "phase2-k8s-autoscale.yaml"
BUDGET = 0.05  # the SLO violations the policy may have (share of the requests)


@cache
def setup() -> tuple[Model, tuple[RoleTarget, ...], list, dict[str, int], int | None]:
    spec, _ = load_text(Path(EXAMPLE).read_text(), EXAMPLE.name)
    plan = make_plan(spec)
    cap = capacity(plan)
    roles = targets(plan, cap)
    model = from_capacity(cap, {t.role: t.gpus_per_instance for t in roles})
    trace = shifting_trace(model, cap.traffic.prompt_tokens, cap.traffic.output_tokens)
    replicas = {"prefill": spec.prefill.replicas, "decode": spec.decode.replicas}
    assert spec.autoscaling is not None
    return model, roles, trace, replicas, spec.autoscaling.max_gpus


def rules(roles: tuple[RoleTarget, ...]) -> list[RoleRule]:
    return [
        RoleRule(
            t.role, t.metric, t.target, t.min_replicas, t.max_replicas, t.gpus_per_instance,
            t.scale_up_s, t.scale_down_s,
        )
        for t in roles
    ]


def test_the_trace_shifts_from_prefill_to_decode_heavy() -> None:
    model, _, trace, _, _ = setup()
    first, mid = trace[0], trace[len(trace) // 2]
    assert first.prompt > 10 * first.output and mid.output > mid.prompt
    pre, dec = model.role("prefill"), model.role("decode")
    # the prefill share of the work moves from most to least
    assert first.prompt * pre.prefill_s_per_token > 10 * first.output * dec.decode_s_per_token
    assert mid.prompt * pre.prefill_s_per_token < mid.output * dec.decode_s_per_token


def test_policy_beats_fixed_replicas_on_goodput_per_gpu_hour() -> None:
    model, roles, trace, replicas, max_gpus = setup()
    policy = replay(model, trace, replicas, rules(roles), max_gpus)
    bounds = {t.role: (t.min_replicas, t.max_replicas) for t in roles}
    fixed = best_fixed(model, trace, bounds, max_gpus, BUDGET)
    assert fixed is not None  # some fixed size meets the SLO: the comparison is fair
    assert policy.violations <= BUDGET, policy.line()
    assert policy.goodput_per_gpu_hour > 1.2 * fixed.goodput_per_gpu_hour, (
        policy.line(), fixed.line(),
    )
    assert policy.peak_gpus <= max_gpus  # type: ignore[operator]
    # the spec's own fixed replicas miss the SLO by far on this trace
    assert replay(model, trace, replicas).violations > 0.5
    assert 0 < policy.actions_per_hour < 30, policy.log


def test_both_roles_follow_the_shift() -> None:
    model, roles, trace, replicas, max_gpus = setup()
    log = replay(model, trace, replicas, rules(roles), max_gpus).log
    ups = {line.split()[1] for line in log if "scale up" in line}
    downs = {line.split()[1] for line in log if "scale down" in line}
    assert ups == downs == {"prefill", "decode"}, log
