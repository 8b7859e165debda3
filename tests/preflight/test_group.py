"""Preflight for multi-node groups (check/group.py) over recorded H200 facts: the nodes of a
group must match, the headless node's host is checked like any engine host, and RDMA devices
named for NCCL must be up."""

from __future__ import annotations

from dataclasses import replace

from pdctl.check import run_checks
from pdctl.facts import facts_from
from pdctl.facts.model import Facts
from pdctl.plan import make_plan
from pdctl.spec import load_text
from tests.preflight.conftest import FIX, by_check, raw_of, spec_text

HOSTS = (
    "  - {name: a, address: 10.0.0.1, gpus: [0, 1], runtime: venv, venv: /v}\n"
    "  - {name: b, address: 10.0.0.2, gpus: [0, 1], runtime: venv, venv: /v%s}"
)
GROUP = "{replicas: 1, tensorParallel: 4, nodes: 2}"


def check(facts: Facts, rdma: str = "") -> list:
    spec, _ = load_text(spec_text(HOSTS % rdma, GROUP), "spec.yaml")
    return list(run_checks(make_plan(spec), facts))


def h200_pair(**b_changes: object) -> Facts:
    facts = facts_from({"a": raw_of(FIX / "h200x2"), "b": raw_of(FIX / "h200x2")})
    b = replace(facts.host("b"), **b_changes)
    return replace(facts, hosts=tuple(b if h.name == "b" else h for h in facts.hosts))


def test_matching_nodes_pass_and_the_worker_host_is_checked() -> None:
    found = check(h200_pair())
    same = {f.expected: f for f in by_check(found, "group.same")}
    for what in ("NVIDIA driver", "CUDA version", "GPU model"):
        assert same[f"one {what} on every node"].status == "PASS", same
    assert "a: 580.159.04; b: 580.159.04" in same["one NVIDIA driver on every node"].found
    # The headless node's host (b) gets the GPU checks the leader's host gets.
    assert {f.where for f in by_check(found, "gpu.count")} >= {"b"}


def test_a_node_with_another_driver_fails_the_group() -> None:
    found = check(h200_pair(driver="575.51.03"))
    (driver,) = [f for f in by_check(found, "group.same") if "driver" in f.expected]
    assert driver.status == "FAIL"
    assert driver.found == "a: 580.159.04; b: 575.51.03"
    assert "hang" in driver.fix


def test_named_rdma_devices_must_be_active() -> None:
    found = check(h200_pair(), rdma=", rdmaDevices: [mlx5_0]")
    (rdma,) = by_check(found, "group.rdma")
    assert rdma.status == "FAIL" and rdma.where == "b" and "mlx5_0" in rdma.fix


def test_no_facts_from_a_node_is_said() -> None:
    facts = facts_from({"a": raw_of(FIX / "h200x2")})
    (same,) = by_check(check(facts), "group.same")
    assert same.status == "WARN" and same.found == "no facts from b"


def test_tp_across_nodes_warns_with_the_traffic_per_token() -> None:
    (t,) = by_check(check(h200_pair()), "group.traffic")
    # Llama-3.1-8B: 2 all-reduces x 32 layers of 4096 bf16 values, ring 2(4-1)/4 each.
    assert t.status == "WARN"
    assert t.found.startswith("TP 4 across 2 nodes (2 all-reduces x 32 layers): 0.79 MB per token")
    assert "at 100 Gb/s Ethernet (12.5 GB/s)" in t.found and "(72x slower)" in t.found
    assert "pipelineParallel" in t.fix and "rdmaDevices" in t.fix


def test_pp_across_nodes_moves_only_the_hidden_state() -> None:
    spec, _ = load_text(
        spec_text(HOSTS % "", "{tensorParallel: 2, pipelineParallel: 2, nodes: 2}"), "s.yaml"
    )
    (t,) = by_check(list(run_checks(make_plan(spec), h200_pair())), "group.traffic")
    assert t.status == "PASS" and t.found.startswith("PP across 2 nodes")
    assert "0.01 MB per token" in t.found
