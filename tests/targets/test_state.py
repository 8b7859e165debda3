"""The change plan (pure): desired units from a rendered bundle vs what a host reports."""

from __future__ import annotations

from pathlib import Path

from pdctl.targets.state import (
    ASKED,
    Observed,
    asked_restarts,
    desired_units,
    diff,
    fresh_router,
    parse_observed,
    script_digest,
    whole_groups,
)
from tests.helpers import bundle_of

ROOT = Path(__file__).resolve().parents[2]


MULTIHOST = ROOT / "examples" / "phase0-multihost.yaml"
MULTINODE = ROOT / "examples" / "phase0-multinode.yaml"


def test_desired_units_come_from_the_bundle_with_plan_ports():
    plan, bundle = bundle_of(MULTIHOST)
    units = desired_units(plan, bundle)
    assert {u.name for u in units} == {i.name for i in plan.instances}
    ports = {i.name: i.port for i in plan.instances}
    for u in units:
        assert u.port == ports[u.name]
        assert u.role == "serve"
        assert u.hash == script_digest(bundle[f"hosts/{u.host.name}/{u.name}/start.sh"])
        assert {f.path.rsplit("/", 1)[1] for f in u.files} >= {"start.sh", "stop.sh"}


def test_diff_start_keep_restart_stop():
    plan, bundle = bundle_of(MULTIHOST)
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
    plan, bundle = bundle_of(MULTIHOST)
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


def group_changes(observed_states: dict[str, tuple[bool, str]]):
    """The whole-group change plan of the multi-node example; observed_states: unit ->
    (running, hash or '' for the desired one)."""
    plan, bundle = bundle_of(MULTINODE)
    units = desired_units(plan, bundle)
    observed = [
        Observed(u.host.name, u.name, observed_states[u.name][1] or u.hash,
                 observed_states[u.name][0], "7")
        for u in units if u.name in observed_states
    ]
    leaders = {u.unit.name: u.unit.leader for u in bundle.units}
    return units, {c.unit: c for c in whole_groups(diff(units, observed), leaders)}


def test_a_stopped_worker_restarts_its_whole_group():
    """A headless node that died cannot rejoin its running leader: up restarts the group as
    one (the kept leader too), never starts the worker alone."""
    plan, bundle = bundle_of(MULTINODE)
    names = [u.unit.name for u in bundle.units]
    leader = next(u.unit.name for u in bundle.units if not u.unit.leader)
    worker = next(u.unit.name for u in bundle.units if u.unit.leader)
    states = {n: (True, "") for n in names}
    states[worker] = (False, "")
    _, changes = group_changes(states)
    assert changes[worker].action == "restart" and changes[worker].why == "not running"
    assert changes[leader].action == "restart"
    assert changes[leader].why == (
        f"restart: {worker} of its multi-node group is not running (one group)"
    )


def test_a_group_that_runs_or_is_all_new_is_left_as_diff_says():
    plan, bundle = bundle_of(MULTINODE)
    names = [u.unit.name for u in bundle.units]
    _, running = group_changes({n: (True, "") for n in names})
    assert {c.action for c in running.values()} == {"keep"}
    _, new = group_changes({})
    assert {(c.action, c.why) for c in new.values()} == {("start", "new")}
    stopped = {n: (False, "") for n in names}
    _, after_reboot = group_changes(stopped)  # every node down: they start together
    assert {(c.action, c.why) for c in after_reboot.values()} == {("start", "not running")}


def test_one_changed_node_restarts_the_others_of_its_group():
    plan, bundle = bundle_of(MULTINODE)
    names = [u.unit.name for u in bundle.units]
    leader = next(u.unit.name for u in bundle.units if not u.unit.leader)
    states = {n: (True, "") for n in names}
    states[leader] = (True, "old")
    _, changes = group_changes(states)
    assert changes[leader].why == "spec changed"
    others = [changes[n] for n in names if n != leader]
    assert others and all(c.action == "restart" for c in others)
    assert all(
        c.why == f"restart: {leader} of its multi-node group restarts (one group)" for c in others
    )


def test_a_restart_asked_for_a_worker_takes_its_group_and_leaves_the_rest() -> None:
    """`pdctl restart WORKER`: the worker restarts as asked, its leader with it (one group);
    a unit asked for that is not running stays what diff says (the command refuses it)."""
    plan, bundle = bundle_of(MULTINODE)
    names = [u.unit.name for u in bundle.units]
    leader = next(u.unit.name for u in bundle.units if not u.unit.leader)
    worker = next(u.unit.name for u in bundle.units if u.unit.leader)
    units = desired_units(plan, bundle)
    observed = [Observed(u.host.name, u.name, u.hash, True, "7") for u in units]
    leaders = {u.unit.name: u.unit.leader for u in bundle.units}
    asked = whole_groups(asked_restarts(diff(units, observed), frozenset({worker})), leaders)
    by_unit = {c.unit: c for c in asked}
    assert (by_unit[worker].action, by_unit[worker].why) == ("restart", ASKED)
    assert by_unit[leader].action == "restart"
    assert by_unit[leader].why == f"restart: {worker} of its multi-node group restarts (one group)"
    assert {c.action for n, c in by_unit.items() if n not in (leader, worker)} <= {"keep"}
    assert len(names) >= 2
    down = [Observed(u.host.name, u.name, u.hash, u.name != worker, "7") for u in units]
    stopped = {c.unit: c for c in asked_restarts(diff(units, down), frozenset({worker}))}
    assert (stopped[worker].action, stopped[worker].why) == ("start", "not running")


def test_a_prefill_that_starts_again_restarts_a_kept_mooncake_router_after_it() -> None:
    """vllm-router reads a prefill's Mooncake engine id once, at its own start, and vLLM takes a
    new one at every start: `up` repairing a prefill restarts the router too (its stage comes
    after the engines'). NIXL's router takes the ids from each prefill answer: kept."""
    plan, bundle = bundle_of(ROOT / "examples" / "phase2-mooncake-tcp.yaml")
    units = desired_units(plan, bundle)
    prefill = next(u.name for u in units if u.role == "prefill")
    router = next(u.name for u in units if u.role == "router")
    assert [u.name for u in units][-1] == router  # started, and restarted, after the engines
    observed = [Observed(u.host.name, u.name, u.hash, u.name != prefill, "7") for u in units]
    changes = {c.unit: c for c in fresh_router(diff(units, observed), mooncake=True)}
    assert (changes[prefill].action, changes[prefill].why) == ("start", "not running")
    assert changes[router].action == "restart" and changes[router].why == (
        f"restart: {prefill} starts, and vllm-router reads a prefill's Mooncake engine id "
        "only at its own start")
    assert {c.action for n, c in changes.items() if n not in (prefill, router)} == {"keep"}
    asked = asked_restarts(diff(units, [replace_running(o) for o in observed]),
                           frozenset({prefill}))
    assert {c.unit: c.action for c in fresh_router(asked, True)}[router] == "restart"
    assert {c.unit: c.action for c in fresh_router(diff(units, observed), False)}[router] == (
        "keep")
    running = [replace_running(o) for o in observed]
    assert {c.action for c in fresh_router(diff(units, running), True)} == {"keep"}


def replace_running(o: Observed) -> Observed:
    from dataclasses import replace

    return replace(o, running=True)


def test_up_waits_on_a_pd_routers_readiness_except_in_zmq_discovery_mode() -> None:
    """A P/D router routes once it has a healthy worker of each role (its /readiness); in
    p2p-nccl's ZMQ discovery mode vllm-router 0.1.17 answers 503 there always, and a plain
    router's /liveness is what `up` asks, as `status` does."""
    paths = {}
    for example in ("phase2-nixl-hosts", "phase2-mooncake-tcp", "phase2-p2p-nccl",
                    "phase0-replicas-router"):
        plan, bundle = bundle_of(ROOT / "examples" / f"{example}.yaml")
        units = desired_units(plan, bundle)
        router = next(u for u in units if u.role == "router")
        assert router.health_path == "/liveness"  # status and the repairs ask this
        assert {u.ready_path for u in units if u.role != "router"} == {"/health"}
        paths[example] = router.ready_path
    assert paths == {"phase2-nixl-hosts": "/readiness", "phase2-mooncake-tcp": "/readiness",
                     "phase2-p2p-nccl": "/liveness", "phase0-replicas-router": "/liveness"}
