"""The autoscaling policy (pdctl/autoscale/policy.py): hysteresis band, cooldowns, bounds and
the GPU budget, each decision with its reason."""

from __future__ import annotations

from pdctl.autoscale.policy import RoleRule, decide

PREFILL = RoleRule("prefill", "waiting", 10, 1, 6, 1, scale_up_s=30, scale_down_s=300)
DECODE = RoleRule("decode", "waiting", 20, 1, 4, 2, scale_up_s=30, scale_down_s=300)


def one(
    observed: float, replicas: int = 2, last: float | None = None, now: float = 1000.0,
    busy: float | None = None,
):  # type: ignore[no-untyped-def]
    (d,) = decide(
        [PREFILL], {"prefill": observed}, {"prefill": replicas},
        {} if last is None else {"prefill": last}, now,
        busy=None if busy is None else {"prefill": busy},
    )
    return d


def test_within_the_band_holds_still() -> None:
    for total in (18.5, 20.0, 21.9):  # 9.25 .. 10.95 per instance, target 10 +-10%
        d = one(total)
        assert d.replicas == 2 and "band" in d.reason, d


def test_outside_the_band_scales_toward_the_target() -> None:
    up = one(60.0)  # 30 per instance: 3x the target -> 6 wanted, HPA's limit max(4, 2)
    assert (up.replicas, up.changed) == (6, True) and "scale up" in up.reason
    down = one(10.0, replicas=3)  # 3.3 per instance: one step down at a time
    assert down.replicas == 2 and "scale down" in down.reason


def test_cooldowns_hold_each_direction() -> None:
    assert one(60.0, last=980.0).replicas == 2  # 20 s < scaleUpS 30
    assert "scaleUpS" in one(60.0, last=980.0).reason
    assert one(60.0, last=960.0).replicas > 2  # 40 s >= 30
    assert one(0.0, replicas=3, last=800.0).replicas == 3  # 200 s < scaleDownS 300
    assert "scaleDownS" in one(0.0, replicas=3, last=800.0).reason
    assert one(0.0, replicas=3, last=700.0).replicas == 2  # 300 s


def test_min_and_max_replicas() -> None:
    assert one(1000.0, replicas=6).replicas == 6  # at max
    assert "maxReplicas" in one(1000.0, replicas=6).reason
    assert one(0.0, replicas=1).replicas == 1  # at min
    assert one(0.0, replicas=9, last=999.0).replicas == 6  # above max: back within, no cooldown


def test_busy_guards_scale_down_and_leads_scale_up() -> None:
    # the queue is empty, but the two instances are 1.7 busy: one alone would be 170% busy
    held = one(0.0, replicas=2, busy=1.7)
    assert held.replicas == 2 and "busy" in held.reason
    assert one(0.0, replicas=2, busy=0.6).replicas == 1
    ahead = one(20.0, replicas=2, busy=1.9)  # on target, but 95% busy
    assert ahead.replicas == 3 and "ahead" in ahead.reason


def test_the_gpu_budget_is_never_exceeded() -> None:
    rules = [PREFILL, DECODE]
    replicas = {"prefill": 2, "decode": 2}  # 2 + 4 = 6 GPUs
    observed = {"prefill": 100.0, "decode": 200.0}  # both want to grow
    for budget in range(6, 20):
        out = decide(rules, observed, replicas, {}, 0.0, max_gpus=budget)
        used = sum(d.replicas * r.gpus_per_instance for d, r in zip(out, rules, strict=True))
        assert used <= budget, (budget, out)
    tight = decide(rules, observed, replicas, {}, 0.0, max_gpus=7)
    assert tight[0].replicas == 3 and tight[1].replicas == 2
    assert "GPU budget 7" in tight[1].reason


def test_a_scale_down_frees_gpus_for_a_scale_up() -> None:
    rules = [PREFILL, DECODE]
    out = decide(
        rules, {"prefill": 0.0, "decode": 200.0}, {"prefill": 3, "decode": 2}, {}, 0.0, max_gpus=9
    )  # 3 + 4 = 7; prefill 3->2 frees 1, decode +1 needs 2
    assert [d.replicas for d in out] == [2, 3]
