"""Multi-node groups in the plan (plan/group.py): hosts, ranks, leader, rendezvous ports, the
exact vLLM flags of every node (and that each exists in the pinned version), the router's
endpoints and the firewall list."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pdctl.capacity import model_fit, spec_model_config, spec_shape
from pdctl.capacity.memory import weights_bytes_per_gpu
from pdctl.compat import release
from pdctl.errors import SpecError
from pdctl.plan import make_plan
from pdctl.plan.group import all_nodes
from pdctl.render import render
from pdctl.spec import load_text
from tests.helpers import plan_of

ROOT = Path(__file__).resolve().parents[2]
MULTINODE_EXAMPLES = ("phase0-multinode.yaml", "phase2-wide-ep.yaml")


def host(name: str, last: int, gpus: int = 8, **extra: object) -> dict:
    return {"name": name, "address": f"192.0.2.{last}", "gpus": list(range(gpus)), **extra}


def serve_doc(serve: dict, hosts: list[dict] | None = None, **top: object) -> dict:
    return {
        "name": "big", "phase": 0, "model": {"name": "meta-llama/Llama-3.1-405B-Instruct"},
        "hosts": hosts or [host("gpu-a", 10, networkInterface="eth1"), host("gpu-b", 11)],
        "serve": serve, **top,
    }


def flags_of(args: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            nxt = args[i + 1] if i + 1 < len(args) else "--"
            out[arg] = "" if nxt.startswith("--") else nxt
    return out


@pytest.mark.parametrize("version", ["0.23.0", "0.33.0"])
@pytest.mark.parametrize("name", MULTINODE_EXAMPLES)
def test_every_rendered_flag_exists_in_the_pinned_version(name: str, version: str) -> None:
    doc = yaml.safe_load((ROOT / "examples" / name).read_text())
    doc["engine"]["version"] = version
    plan = plan_of(doc)
    rel = release(version)
    engines = [u for u in plan.units if u.role in ("serve", "prefill", "decode")]
    assert any(u.leader for u in engines), "the example has no multi-node group"
    for unit in engines:
        command = unit.command
        if command[:2] == ("python3", "guard.py"):  # a process node under the group guard
            command = command[command.index("--") + 1 :]
        for flag in flags_of(command):
            assert rel.has_flag(flag), f"{unit.name}: {flag} is not in vLLM {version}"


def test_tp_pp_across_nodes_leader_and_headless_worker_flags() -> None:
    plan = plan_of(serve_doc({"tensorParallel": 8, "pipelineParallel": 2, "nodes": 2}))
    (inst,) = plan.instances
    (worker,) = inst.workers
    assert (inst.host.name, worker.host.name) == ("gpu-a", "gpu-b")
    lead, work = flags_of(inst.args), flags_of(worker.args)
    assert lead["--nnodes"] == work["--nnodes"] == "2"
    assert (lead["--node-rank"], work["--node-rank"]) == ("0", "1")
    assert lead["--master-addr"] == work["--master-addr"] == "192.0.2.10"
    assert lead["--master-port"] == work["--master-port"] == "29501"
    assert lead["--tensor-parallel-size"] == "8" and lead["--pipeline-parallel-size"] == "2"
    assert "--headless" not in lead and work["--headless"] == ""
    assert worker.leader == inst.name and worker.name == f"{inst.name}-node1"
    assert len(inst.gpus) == len(worker.gpus) == 8
    leader_env, worker_env = dict(inst.env), dict(worker.env)
    assert leader_env["NCCL_SOCKET_IFNAME"] == leader_env["GLOO_SOCKET_IFNAME"] == "eth1"
    assert "NCCL_SOCKET_IFNAME" not in worker_env  # gpu-b names no interface
    assert worker_env["VLLM_HOST_IP"] == "192.0.2.11"
    # Each node's group guard port (plan/guard.py): the first guarded node on each address.
    assert dict(inst.extra_ports) == {"rendezvous": 29501, "guard": 29700}
    assert dict(worker.extra_ports) == {"guard": 29700}
    units = {u.name: u for u in plan.units}
    assert units[worker.name].leader == inst.name
    assert units[worker.name].health_path is None
    assert units[inst.name].health_path == "/health"


def test_data_parallel_across_nodes_ranks_and_rpc_port() -> None:
    doc = serve_doc(
        {"dataParallel": 8, "nodes": 2, "expertParallel": True, "rendezvousPort": 13345}
    )
    doc["model"] = {"name": "Qwen/Qwen3-30B-A3B"}
    plan = plan_of(doc)
    (inst,) = plan.instances
    lead, work = flags_of(inst.args), flags_of(inst.workers[0].args)
    for f in (lead, work):
        assert f["--data-parallel-size"] == "8"
        assert f["--data-parallel-size-local"] == "4"
        assert f["--data-parallel-address"] == "192.0.2.10"
        assert f["--data-parallel-rpc-port"] == "13345"
        assert f["--enable-expert-parallel"] == ""
    assert "--data-parallel-start-rank" not in lead and "--headless" not in lead
    assert work["--data-parallel-start-rank"] == "4" and work["--headless"] == ""
    assert "--nnodes" not in lead
    assert len(inst.gpus) == 4


def test_each_instance_spans_distinct_hosts_and_rendezvous_ports_follow() -> None:
    hosts = [host("gpu-a", 10, 16), host("gpu-b", 11, 16)]
    plan = plan_of(serve_doc({"replicas": 2, "tensorParallel": 16, "nodes": 2}, hosts))
    for inst in plan.instances:
        assert {inst.host.name, inst.workers[0].host.name} == {"gpu-a", "gpu-b"}
    ports = sorted(dict(i.extra_ports)["rendezvous"] for i in plan.instances)
    assert ports == [29501, 29502]
    gpus = [(n.host.name, g) for n in all_nodes(plan.instances) for g in n.gpus]
    assert len(gpus) == len(set(gpus)) == 32


@pytest.mark.parametrize(
    ("serve", "hosts", "path", "words"),
    [
        ({"dataParallel": 3, "nodes": 2}, None, "serve.dataParallel", "spread evenly"),
        ({"tensorParallel": 3, "nodes": 2}, None, "serve.nodes", "split evenly"),
        ({"tensorParallel": 8, "nodes": 3}, None, "serve.nodes", "split evenly"),
        ({"tensorParallel": 16, "nodes": 2}, [host("gpu-a", 10, 16)], "serve.nodes", "hosts"),
        ({"expertParallel": True}, None, "serve.expertParallel", "more than one GPU"),
    ],
)
def test_impossible_groups_are_spec_errors(serve, hosts, path, words) -> None:
    with pytest.raises(SpecError) as err:
        plan_of(serve_doc(serve, hosts))
    assert err.value.path == path
    assert words in str(err.value)


def test_docker_hosts_run_a_group_on_the_host_network() -> None:
    hosts = [host("gpu-a", 10, runtime="docker"), host("gpu-b", 11, runtime="docker")]
    plan = plan_of(serve_doc({"tensorParallel": 16, "nodes": 2}, hosts))
    units = [u for u in plan.units if u.role == "serve"]
    assert len(units) == 2 and all(u.image and u.publish == () for u in units)


def test_phase2_router_gets_the_leaders_and_the_firewall_the_group_ports() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "phase2-wide-ep.yaml").read_text())
    plan = plan_of(doc)
    (router,) = [s for s in plan.services if s.role == "router"]
    cmd = " ".join(router.command)
    assert "--prefill http://198.51.100.10:8100" in cmd
    assert "--decode http://198.51.100.12:8200" in cmd
    assert "198.51.100.11" not in cmd and "198.51.100.13" not in cmd  # headless nodes
    rules = {(r.host, r.ports, r.purpose) for r in plan.ports}
    assert ("gpu-a", "29550", "dsv3-wide-ep-prefill-0 group rendezvous") in rules
    assert ("gpu-c", "29550", "dsv3-wide-ep-decode-0 group rendezvous") in rules
    # NIXL adds the DP rank to the side-channel port: node 1's ranks 8..15 use base+8..15.
    (decode,) = [i for i in plan.instances if i.role == "decode"]
    assert dict(decode.workers[0].env)["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5592"
    sides = [p for k, p in decode.workers[0].extra_ports if k == "nixl-side-channel"]
    assert sides == list(range(5600, 5608))


def test_phase2_group_needs_nixl() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "phase2-wide-ep.yaml").read_text())
    doc["disaggregation"] = {"connector": "mooncake"}
    with pytest.raises(SpecError) as err:
        plan_of(doc)
    assert err.value.path == "prefill.nodes"


def test_phase2_group_on_kubernetes_plans_a_leader_with_headless_workers() -> None:
    """Was refused (one Deployment per role); now each role leads a LeaderWorkerSet group."""
    doc = yaml.safe_load((ROOT / "examples" / "phase2-wide-ep.yaml").read_text())
    spec, _ = load_text(yaml.safe_dump(doc, sort_keys=False), "spec.yaml")
    plan = make_plan(spec, target="kubernetes")
    for inst in plan.instances:
        (worker,) = inst.workers
        assert (inst.gpu_count, worker.gpu_count, worker.replicas) == (8, 8, 1)
        assert "--headless" in worker.args and "--headless" not in inst.args
        assert worker.leader == inst.name
        assert inst.launch[:2] == ("/bin/sh", "-c")


def test_memory_per_gpu_shards_experts_by_expert_parallel() -> None:
    spec, _ = load_text((ROOT / "examples" / "phase2-wide-ep.yaml").read_text(), "x.yaml")
    model = spec_model_config(spec.model)
    shape = spec_shape(spec, "decode")
    assert (shape.tp, shape.ep) == (1, 16)  # TP 1 x DP 16 with expertParallel
    weights = model_fit(model, shape).weights
    whole = weights_bytes_per_gpu(model, 1, 1, "auto")
    experts_whole = 2 * (whole - weights_bytes_per_gpu(model, 1, 1, "auto", ep=2))
    # Each GPU holds 1/16 of the experts and all of the rest (TP 1).
    assert abs(weights - (whole - experts_whole * 15 / 16)) < 1024
    assert 50 * 2**30 < weights < 60 * 2**30  # DeepSeek-V3 FP8 over 16 H200s: ~56 GiB each
    assert weights_bytes_per_gpu(model, 8, 1, "auto", ep=8) == weights_bytes_per_gpu(model, 8)


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=4), replicas=st.integers(1, 3),
    nodes=st.integers(1, 4), tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2]),
    dp=st.sampled_from([1, 2, 4, 8]),
)
def test_groups_plan_consistently_or_refuse_with_a_path(gpus, replicas, nodes, tp, pp, dp):
    hosts = [host(f"h{i}", 10 + i, n) for i, n in enumerate(gpus)]
    serve = {
        "replicas": replicas, "nodes": nodes, "tensorParallel": tp, "pipelineParallel": pp,
        "dataParallel": dp,
    }
    try:
        plan = plan_of(serve_doc(serve, hosts))
    except SpecError as exc:
        assert exc.path.startswith(("serve", "hosts")), exc
        return
    assert len(plan.instances) == replicas
    used: set[tuple[str, int]] = set()
    for inst in plan.instances:
        group = (inst, *inst.workers)
        assert len(group) == nodes
        assert len({n.host.name for n in group}) == nodes  # one node per host
        for rank, node in enumerate(group):
            assert len(node.gpus) == tp * pp * dp // nodes
            assert not used & {(node.host.name, g) for g in node.gpus}
            used |= {(node.host.name, g) for g in node.gpus}
            flags = flags_of(node.args)
            assert ("--headless" in flags) == (rank > 0)
            if dp > 1 and nodes > 1:
                assert flags["--data-parallel-start-rank" if rank else "--data-parallel-size"]
            elif nodes > 1:
                assert flags["--node-rank"] == str(rank)


def test_phase0_group_bundle_lists_its_ports() -> None:
    plan = plan_of(serve_doc({"tensorParallel": 16, "nodes": 2, "rendezvousPort": 29600}))
    ports = render(plan)["ports.md"]
    assert "| gpu-a | 192.0.2.10 | 29600 | its group's nodes (gpu-b) |" in ports
    assert "| gpu-b | 192.0.2.11 | 32768-60999 |" in ports
    single = plan_of(serve_doc({"tensorParallel": 8}))
    assert "ports.md" not in render(single).paths()
