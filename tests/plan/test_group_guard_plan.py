"""The group guard step (plan/guard.py): which groups run under the guard, each node's guard
port, the peers each node asks, the file beside the scripts and the firewall list."""

from __future__ import annotations

import pytest

from pdctl.errors import SpecError
from pdctl.plan.group import all_nodes
from pdctl.plan.guard import guard_source
from pdctl.render import render
from tests.helpers import plan_of
from tests.plan.test_multinode_plan import host, serve_doc

TP_PP = {"tensorParallel": 8, "pipelineParallel": 2, "nodes": 2}


def guard_args(command: tuple[str, ...]) -> tuple[dict[str, list[str]], tuple[str, ...]]:
    """The guard's options (flag -> values) and the engine command it runs."""
    assert command[:2] == ("python3", "guard.py"), command
    cut = command.index("--")
    opts: dict[str, list[str]] = {}
    for flag, value in zip(command[2:cut:2], command[3:cut:2], strict=True):
        opts.setdefault(flag, []).append(value)
    return opts, command[cut + 1 :]


def test_every_node_of_a_process_group_runs_under_the_guard_and_asks_the_others() -> None:
    hosts = [host("gpu-a", 10), host("gpu-b", 11), host("gpu-c", 12)]
    plan = plan_of(serve_doc({"tensorParallel": 8, "pipelineParallel": 3, "nodes": 3}, hosts))
    units = {u.name: u for u in plan.units}
    names = ["big-serve-0", "big-serve-0-node1", "big-serve-0-node2"]
    for name, last in zip(names, (10, 11, 12), strict=True):
        opts, engine = guard_args(units[name].command)
        assert opts["--name"] == [name] and opts["--listen"] == [f"192.0.2.{last}:29700"]
        others = {f"{n}=192.0.2.{a}:29700" for n, a in zip(names, (10, 11, 12), strict=True)}
        assert set(opts["--peer"]) == others - {f"{name}=192.0.2.{last}:29700"}
        assert engine[:2] == ("vllm", "serve") and "--nnodes" in engine
        assert dict(units[name].files)["guard.py"] == guard_source()
    files = render(plan)
    assert files["hosts/gpu-b/big-serve-0-node1/guard.py"] == guard_source()
    serve = files["hosts/gpu-b/big-serve-0-node1/serve.sh"]
    assert "exec python3 guard.py --name big-serve-0-node1 --listen 192.0.2.11:29700" in serve
    rules = [r for r in plan.ports if "group guard" in r.purpose]
    assert [(r.host, r.ports) for r in rules] == [
        ("gpu-a", "29700"), ("gpu-b", "29700"), ("gpu-c", "29700"),
    ]
    assert all(r.opened_to == "its group's nodes (big-serve-0)" for r in rules)


def test_nodes_on_one_address_take_their_own_guard_ports() -> None:
    """Two hosts of one address (two sshd ports of one machine): each node listens on its own
    port, and a second group on the same hosts takes the next ones; a role's guardPort moves
    them."""
    hosts = [host("lo1", 10), host("lo2", 10)]
    for port, h in zip((2201, 2202), hosts, strict=True):
        h.update(address="127.0.0.1", port=port)
    plan = plan_of(serve_doc({**TP_PP, "tensorParallel": 4, "replicas": 2}, hosts))
    ports = {n.name: dict(n.extra_ports)["guard"] for i in plan.instances for n in (i, *i.workers)}
    assert sorted(ports.values()) == [29700, 29701, 29702, 29703]
    leader = next(u for u in plan.units if u.name == "big-serve-0")
    opts, _ = guard_args(leader.command)
    assert opts["--peer"] == [f"big-serve-0-node1=127.0.0.1:{ports['big-serve-0-node1']}"]
    moved = plan_of(serve_doc({**TP_PP, "guardPort": 31000}, hosts))
    assert sorted(dict(n.extra_ports)["guard"] for n in all_nodes(moved.instances)) == [
        31000, 31001,
    ]
    with pytest.raises(SpecError) as err:
        plan_of(serve_doc({**TP_PP, "guardPort": 65535}, hosts))
    assert (err.value.path, err.value.fix) == ("serve.guardPort", "lower guardPort")


def test_single_node_engines_are_not_guarded() -> None:
    single = plan_of(serve_doc({"tensorParallel": 8}))
    assert all(u.command[0] == "vllm" for u in single.units)
    assert not any("guard" in dict(i.extra_ports) for i in single.instances)
    assert not any("group guard" in r.purpose for r in single.ports)


def test_a_container_node_runs_the_guard_as_its_entrypoint_with_a_restart_delay() -> None:
    hosts = [host("gpu-a", 10, runtime="docker"), host("gpu-b", 11, runtime="docker")]
    plan = plan_of(serve_doc(TP_PP, hosts))
    worker = next(u for u in plan.units if u.name == "big-serve-0-node1")
    assert worker.entrypoint == "python3"
    assert worker.command[0] == "/pdctl/unit/guard.py"  # the unit folder, mounted
    opts, engine = guard_args(("python3", "guard.py", *worker.command[1:]))
    assert opts["--listen"] == ["192.0.2.11:29700"]
    assert opts["--peer"] == ["big-serve-0=192.0.2.10:29700"]
    assert opts["--restart-delay"] == ["10"]  # Docker restarts at once; systemd waits 10 s
    assert engine[:3] == ("vllm", "serve", "meta-llama/Llama-3.1-405B-Instruct")
    start = render(plan)["hosts/gpu-b/big-serve-0-node1/start.sh"]
    assert "  --entrypoint python3 \\\n  vllm/vllm-openai:" in start
    assert "/pdctl/unit/guard.py --name big-serve-0-node1 --listen 192.0.2.11:29700" in start
    assert render(plan)["hosts/gpu-b/big-serve-0-node1/guard.py"] == guard_source()


def test_a_guard_port_that_clashes_with_another_port_is_refused() -> None:
    with pytest.raises(SpecError) as err:
        plan_of(serve_doc({**TP_PP, "port": 29700}))
    assert err.value.path == "serve.nodes"
    assert "port 29700 on host gpu-a" in str(err.value) and "group guard" in str(err.value)
