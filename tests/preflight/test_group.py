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
