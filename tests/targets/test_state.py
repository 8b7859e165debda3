"""The change plan (pure): desired units from a rendered bundle vs what a host reports."""

from __future__ import annotations

from pathlib import Path

from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text
from pdctl.targets.state import Observed, desired_units, diff, parse_observed, script_digest

ROOT = Path(__file__).resolve().parents[2]


def plan_and_bundle(name: str = "phase0-multihost.yaml"):
    spec, _ = load_text((ROOT / "examples" / name).read_text(), name)
    plan = make_plan(spec)
    return plan, render(plan)


def test_desired_units_come_from_the_bundle_with_plan_ports():
    plan, bundle = plan_and_bundle()
    units = desired_units(plan, bundle)
    assert {u.name for u in units} == {i.name for i in plan.instances}
    ports = {i.name: i.port for i in plan.instances}
    for u in units:
        assert u.port == ports[u.name]
        assert u.role == "serve"
        assert u.hash == script_digest(bundle[f"hosts/{u.host.name}/{u.name}/start.sh"])
        assert {f.path.rsplit("/", 1)[1] for f in u.files} >= {"start.sh", "stop.sh"}


def test_diff_start_keep_restart_stop():
    plan, bundle = plan_and_bundle()
    units = desired_units(plan, bundle)
    a, b = units[0], units[1]
    observed = [
        Observed(a.host.name, a.name, a.hash, True, "10"),
        Observed(b.host.name, b.name, "old", True, "11"),
        Observed(a.host.name, "gone-unit", "x", True, "12"),
    ]
    actions = {c.unit: c.action for c in diff(units, observed)}
    assert actions[a.name] == "keep"
    assert actions[b.name] == "restart"
    assert actions["gone-unit"] == "stop"
    for u in units[2:]:
        assert actions[u.name] == "start"


def test_stopped_unit_with_same_script_is_started_again():
    plan, bundle = plan_and_bundle()
    u = desired_units(plan, bundle)[0]
    (change,) = [c for c in diff([u], [Observed(u.host.name, u.name, u.hash, False)])]
    assert (change.action, change.why) == ("start", "not running")


def test_parse_observed_ignores_noise():
    text = "u1\tabc\trunning\t42\t-\ngarbage line\nu2\t-\tstopped\t-\t-\nc\tx\trunning\tab12\t3\n"
    assert parse_observed("h", text) == [
        Observed("h", "u1", "abc", True, "42", state="running"),
        Observed("h", "u2", "", False, "-", state="stopped"),
        Observed("h", "c", "x", True, "ab12", restarts=3, state="running"),
    ]
