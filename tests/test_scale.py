"""`pdctl scale` on hosts, the pure parts: ROLE=N, the refusals (exit 2), what starts and stops
for a given N against what runs (the plan of the scaled spec; the router keeps the unit that
runs), and the router's and engines' answers read back."""

from __future__ import annotations

import json

import pytest
import yaml

from pdctl.errors import PdctlError, SpecError, UsageError
from pdctl.render import render
from pdctl.scale import (
    Moves,
    check_request,
    in_flight,
    mixed,
    moves,
    parse_request,
    worker_urls,
)
from pdctl.targets.state import Observed, desired_units, diff
from tests.conftest import ROOT
from tests.helpers import bundle_of, cli, plan_of

HOST = {"name": "a", "address": "192.0.2.30", "gpus": [0, 1, 2], "runtime": "venv", "venv": "/v"}


def doc(replicas: int) -> dict:
    return {
        "name": "sc", "phase": 0, "model": {"name": "m/m"}, "hosts": [HOST],
        "serve": {"replicas": replicas, "port": 8000}, "router": {"port": 8080},
    }


def planned(replicas: int, scaled: bool = True):
    return bundle_of(doc(replicas), scaled=scaled)


def running(replicas: int) -> list[Observed]:
    """What `up` of the spec at `replicas` left running (the hashes it wrote)."""
    plan, bundle = planned(replicas)
    return [Observed("a", d.name, d.hash, True) for d in desired_units(plan, bundle)]


def what_scale_does(deployed: int, now: int, to: int) -> Moves:
    """The moves of `scale serve=TO` for a spec of `deployed` replicas when `now` run."""
    _, spec_bundle = planned(deployed, scaled=False)
    plan, scaled = planned(to)
    units = desired_units(plan, mixed(spec_bundle, scaled, "serve"))
    role_units = {u.unit.name for u in scaled.units if u.unit.role == "serve"}
    seen = [o for o in running(now) if o.name != "sc-router"]
    seen += [o for o in running(deployed) if o.name == "sc-router"]
    return moves(diff(units, seen), role_units, "serve")


@pytest.mark.parametrize(("deployed", "now", "to", "start", "stop"), [
    (2, 2, 3, ("sc-serve-2",), ()),
    (2, 2, 1, (), ("sc-serve-1",)),
    (2, 3, 1, (), ("sc-serve-1", "sc-serve-2")),
    (2, 1, 2, ("sc-serve-1",), ()),
    (2, 2, 2, (), ()),
])
def test_what_starts_and_stops_for_n(deployed, now, to, start, stop):
    # The router is kept as the spec deployed it (its members change through its API), and
    # the engines that stay are not restarted: only the difference starts or stops.
    assert what_scale_does(deployed, now, to) == Moves(start, stop)


def test_one_engine_behind_the_router_is_planned_only_for_scale():
    plan, _ = planned(1)
    assert [s.role for s in plan.services] == ["router"]
    with pytest.raises(SpecError, match="spreads nothing"):
        planned(1, scaled=False)


def test_a_drifted_unit_of_another_role_is_refused_not_restarted():
    _, spec_bundle = planned(2, scaled=False)
    plan, scaled = planned(3)
    units = desired_units(plan, mixed(spec_bundle, scaled, "serve"))
    seen = [o if o.name != "sc-router" else Observed("a", o.name, "old", True) for o in running(2)]
    with pytest.raises(PdctlError, match=r"sc-router on a \(restart: spec changed\).*pdctl up"):
        moves(diff(units, seen), {"sc-serve-0", "sc-serve-1", "sc-serve-2"}, "serve")


@pytest.mark.parametrize(
    ("text", "want"), [("serve=2", ("serve", 2)), ("decode=10", ("decode", 10))]
)
def test_role_equals_n(text, want):
    assert parse_request(text) == want


@pytest.mark.parametrize("text", ["serve", "serve=", "=2", "serve=two"])
def test_not_role_equals_n(text):
    with pytest.raises(UsageError, match="is not ROLE=N"):
        parse_request(text)


@pytest.mark.parametrize(("role", "n", "kind", "why"), [
    ("decode", 2, "hosts", "phase 0 runs no role 'decode'; scale serve"),
    ("serve", 0, "hosts", "serve=0: a role needs at least 1 instance"),
    ("serve", 2, "docker", "works on SSH hosts, not docker"),
])
def test_refused_requests(role, n, kind, why):
    plan, _ = planned(2)
    with pytest.raises(UsageError) as exc:
        check_request(plan, kind, role, n)
    assert why in exc.value.line()


@pytest.mark.parametrize(("argv", "why"), [
    (["examples/phase1-k8s.yaml", "serve=3"], "rendered HorizontalPodAutoscaler or KEDA"),
    (["examples/phase0-replicas-router.yaml", "serve=5"],
     "serve=5:1: serve.replicas: serve instance 5 of 5 needs 2 free GPUs"),
    (["examples/phase0-replicas-router.yaml", "prefill=2"], "phase 0 runs no role 'prefill'"),
    (["examples/phase2-p2p-nccl.yaml", "decode=1"], "register with the router over ZMQ"),
])
def test_the_cli_refuses_in_one_line_before_connecting(argv, why, monkeypatch):
    monkeypatch.chdir(ROOT)
    _, err = cli(["scale", *argv], code=2)
    assert why in " ".join(err.split()), err
    assert "Traceback" not in err


def test_worker_urls_and_requests_in_flight_read_back():
    listed = {"workers": [{"url": "http://10.0.0.1:8000", "worker_type": "regular"},
                          {"url": "http://10.0.0.1:8001", "is_healthy": True}], "total": 2}
    assert worker_urls(json.dumps(listed)) == {"http://10.0.0.1:8000", "http://10.0.0.1:8001"}
    metrics = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="tiny"} 2.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="tiny"} 1.0\n'
        'vllm:num_requests_running_total{engine="0"} 9.0\n'
    )
    assert in_flight(metrics) == 3.0
    assert in_flight(metrics.replace("2.0", "0.0").replace("1.0\n", "0.0\n")) == 0.0


def test_a_pd_scale_up_restarts_the_router_with_the_new_members(monkeypatch):
    # vllm-router 0.1.17's PD router takes no new worker while it runs: in P/D mode the
    # router's unit is the scaled plan's (its --decode list grows), restarted after the new
    # engine; in plain mode the router keeps the unit that runs (its worker API).
    monkeypatch.chdir(ROOT)
    data = yaml.safe_load((ROOT / "examples/phase2-nixl-hosts.yaml").read_text())
    data["hosts"][0]["gpus"] = [0, 1, 2]
    plan = plan_of(data)
    bundle = render(plan)
    data["decode"]["replicas"] = 2
    up_plan = plan_of(data, scaled=True)
    up_bundle = render(up_plan)
    router = next(s.name for s in up_plan.services if s.role == "router")
    assert mixed(bundle, up_bundle, "decode", pd=True) is up_bundle
    seen = [Observed(d.host.name, d.name, d.hash, True) for d in desired_units(plan, bundle)]
    changes = diff(desired_units(up_plan, up_bundle), seen)
    role_units = {u.unit.name for u in up_bundle.units if u.unit.role == "decode"}
    got = moves(changes, role_units, "decode", router)
    assert len(got.start) == 1 and got.stop == () and got.restart == (router,), got
    with pytest.raises(PdctlError, match="restart: spec changed"):  # not named: refused
        moves(changes, role_units, "decode")
