"""Preflight for multi-node groups (preflight/group.py) over recorded H200 facts: the nodes of a
group must match, the headless node's host is checked like any engine host, and RDMA devices
named for NCCL must be up."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pdctl.plan import make_plan
from pdctl.preflight.facts import Facts
from pdctl.preflight.group import (
    LISTEN,
    MEMLOCK,
    REACH,
    VLLM_VERSION,
    memlock_command,
    parse_memlock,
    parse_memlock_where,
)
from pdctl.preflight.registry import facts_from, gather, run_checks
from pdctl.preflight.run import Options
from pdctl.spec import load_text
from pdctl.spec.model import Host
from pdctl.targets.ssh import SshOptions
from tests.helpers import plan_of
from tests.preflight.conftest import FIX, by_check, raw_of, spec_text
from tests.preflight.sshd_hosts import sshd_hosts
from tests.targets.testbed import free_port

HOSTS = (
    "  - {name: a, address: 10.0.0.1, gpus: [0, 1], runtime: venv, venv: /v}\n"
    "  - {name: b, address: 10.0.0.2, gpus: [0, 1], runtime: venv, venv: /v%s}"
)
GROUP = "{replicas: 1, tensorParallel: 4, nodes: 2}"


def check(facts: Facts, rdma: str = "") -> list:
    return list(run_checks(plan_of(spec_text(HOSTS % rdma, GROUP)), facts))


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


# Probes of probe/group.py: vLLM version, memlock, reach (recorded outputs) ---------------------
def with_raw(extra: dict[str, dict[str, str]]) -> Facts:
    raw = {n: {**raw_of(FIX / "h200x2"), **extra.get(n, {})} for n in ("a", "b")}
    return facts_from(raw)


REACHED = {
    "a": {LISTEN: "group t-serve-0\nlistening 29501\naccepted 10.0.0.2\n"},
    "b": {
        REACH: "leader t-serve-0 10.0.0.1 29501\nroute 10.0.0.1 dev eth0 src 10.0.0.2\n"
        "connected 10.0.0.1 29501\n"
    },
}


def test_one_vllm_version_on_every_node() -> None:
    same = with_raw({"a": {VLLM_VERSION: "0.33.0\n"}, "b": {VLLM_VERSION: "0.33.0\n"}})
    (ok,) = by_check(check(same), "group.vllm")
    assert ok.status == "PASS" and ok.found == "a: 0.33.0; b: 0.33.0"
    other = with_raw({"a": {VLLM_VERSION: "0.33.0\n"}, "b": {VLLM_VERSION: "0.32.1\n"}})
    (bad,) = by_check(check(other), "group.vllm")
    assert bad.status == "FAIL" and bad.found == "a: 0.33.0; b: 0.32.1"
    missing = "Traceback (most recent call last):\nPackageNotFoundError: No package metadata\n"
    none = with_raw({"a": {VLLM_VERSION: "0.33.0\n"}, "b": {VLLM_VERSION: missing}})
    (warn,) = by_check(check(none), "group.vllm")
    assert warn.status == "WARN" and warn.found == "a: 0.33.0; b: not found"


def test_memlock_must_be_unlimited_on_rdma_hosts() -> None:
    rdma = ", rdmaDevices: [mlx5_0]"
    low = with_raw({"a": {MEMLOCK: "unlimited\n"}, "b": {MEMLOCK: "8192\n"}})
    (b,) = by_check(check(low, rdma), "group.memlock")  # only b names RDMA devices
    assert b.status == "FAIL" and b.found == "ulimit -l: 8192 KiB"
    assert b.where == "b" and "memlock unlimited" in b.fix
    (big,) = by_check(
        check(with_raw({"b": {MEMLOCK: str(64 << 20) + "\n"}}), rdma), "group.memlock"
    )
    assert big.status == "WARN"
    (ok,) = by_check(check(with_raw({"b": {MEMLOCK: "unlimited\n"}}), rdma), "group.memlock")
    assert ok.status == "PASS" and ok.found == "ulimit -l: unlimited"
    assert by_check(check(low), "group.memlock") == []  # no RDMA named: no check


def test_a_node_that_connected_to_the_leader_passes() -> None:
    (r,) = by_check(check(with_raw(REACHED)), "group.reach")
    assert r.status == "PASS" and r.where == "b"
    assert r.found == "connected (route: 10.0.0.1 dev eth0 src 10.0.0.2)"


def test_unreachable_leader_and_taken_port_fail() -> None:
    lost = {
        "b": {
            REACH: "leader t-serve-0 10.0.0.1 29501\nroute RTNETLINK answers: Network is "
            "unreachable\nfailed 10.0.0.1 29501 ENETUNREACH\n"
        },
        "a": {LISTEN: "group t-serve-0\nbind-error 29501 Address already in use\n"},
    }
    found = {f.where: f for f in by_check(check(with_raw(lost)), "group.reach")}
    assert found["b"].status == "FAIL" and found["b"].found.startswith("ENETUNREACH")
    assert "no route" in found["b"].fix
    assert found["a"].status == "FAIL" and found["a"].found == "Address already in use"


def test_a_route_off_the_nccl_interface_warns() -> None:
    spec, _ = load_text(spec_text(HOSTS % ", networkInterface: ib0", GROUP), "spec.yaml")
    (r,) = by_check(list(run_checks(make_plan(spec), with_raw(REACHED))), "group.reach")
    assert r.status == "WARN" and "leaves through eth0" in r.fix and "ib0" in r.fix


GUARDS_MET = {
    "a": {
        LISTEN: REACHED["a"][LISTEN]
        + "group t-serve-0/guard\nlistening 29700\naccepted 10.0.0.2\n",
        REACH: "leader t-serve-0-node1/guard 10.0.0.2 29700\nconnected 10.0.0.2 29700\n",
    },
    "b": {
        LISTEN: "group t-serve-0-node1/guard\nlistening 29700\naccepted 10.0.0.1\n",
        REACH: REACHED["b"][REACH] + "leader t-serve-0/guard 10.0.0.1 29700\n"
        "failed 10.0.0.1 29700 ETIMEDOUT\n",
    },
}


def test_every_node_must_reach_the_other_nodes_group_guard() -> None:
    found = {f.where: f for f in by_check(check(with_raw(GUARDS_MET)), "group.guard")}
    assert found["a"].status == "PASS"
    assert found["a"].expected == "a connects to t-serve-0-node1 10.0.0.2:29700"
    assert found["b"].status == "FAIL" and found["b"].found == "ETIMEDOUT"
    assert found["b"].fix.startswith("no answer: a firewall drops the packets")
    assert "let b reach 10.0.0.1 on TCP 29700" in found["b"].fix
    (rendezvous,) = by_check(check(with_raw(GUARDS_MET)), "group.reach")
    assert rendezvous.status == "PASS"  # the guard probes are told apart from it
    taken = {
        **GUARDS_MET,
        "b": {
            **GUARDS_MET["b"],
            LISTEN: "group t-serve-0-node1/guard\nbind-error 29700 Address already in use\n",
        },
    }
    bad = [f for f in by_check(check(with_raw(taken)), "group.guard") if f.found.startswith("Add")]
    # a reached it: a running guard holds the port (preflight after `up`)
    assert [(f.where, f.status) for f in bad] == [("b", "WARN")]
    assert bad[0].fix.endswith(
        "running already, nothing to do; else free port 29700 on b, or set guardPort"
    )


def test_guard_ports_unprobed_where_the_rendezvous_was_probed_are_said() -> None:
    found = by_check(check(with_raw(REACHED)), "group.guard")
    assert [(f.where, f.status, f.found) for f in found] == [
        ("b", "WARN", "not probed"), ("a", "WARN", "not probed"),
    ]
    unprobed = check(h200_pair())
    assert by_check(unprobed, "group.guard") == []  # group.reach says it already:
    (r,) = by_check(unprobed, "group.reach")
    assert r.status == "WARN" and r.found == "not probed"


# The same probes over SSH on the real sshd test hosts ------------------------------------------
def _venv(root: Path, version: str) -> Path:
    """A real Python environment whose package metadata says vLLM `version`."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    (site,) = root.glob("lib/python3*/site-packages")
    info = site / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return root


def _gather_group(tmp: Path, names: list[str], versions: list[str], extra: str = "") -> list:
    hosts, key = sshd_hosts(), os.environ["PDCTL_TEST_SSH_KEY"]
    lines = [
        f"  - {{name: {n}, address: '{hosts[n][0]}', port: {hosts[n][1]}, user: root, "
        f"identityFile: '{key}', gpus: [0], runtime: venv, venv: '{_venv(tmp / n, v)}'"
        + (extra if i else "")
        + "}"
        for i, (n, v) in enumerate(zip(names, versions, strict=True))
    ]
    serve = (
        "{replicas: 1, tensorParallel: 1, dataParallel: 2, nodes: 2, "
        f"rendezvousPort: {free_port(1)}, guardPort: {free_port(1)}}}"
    )
    spec, _ = load_text(spec_text("\n".join(lines), serve), "spec.yaml")
    plan = make_plan(spec)
    ssh = SshOptions(known_hosts=os.environ["PDCTL_TEST_KNOWN_HOSTS"])
    raw = gather(plan, Options(ssh=ssh))
    return [f for f in run_checks(plan, facts_from(raw)) if f.check.startswith("group.")]


def test_over_ssh_the_worker_reaches_the_leader_and_versions_are_compared(tmp_path) -> None:
    found = _gather_group(tmp_path, ["lo1", "lo2"], ["0.33.0", "0.32.1"], ", rdmaDevices: [x]")
    (reach,) = by_check(found, "group.reach")
    assert reach.status == "PASS" and reach.where == "lo2", reach
    assert reach.found.startswith("connected (route: local 127.0.0.1 dev lo ")
    assert reach.found.endswith(")") and "\\" not in reach.found
    (version,) = by_check(found, "group.vllm")
    assert version.status == "FAIL" and version.found == "lo1: 0.33.0; lo2: 0.32.1"
    (mem,) = by_check(found, "group.memlock")  # lo2 names an RDMA device
    assert mem.where == "lo2" and re.fullmatch(r"ulimit -l: (unlimited|\d+ KiB)", mem.found)
    # Each node reached the other's group guard port.
    guards = {f.where: f for f in by_check(found, "group.guard")}
    assert {w: f.status for w, f in guards.items()} == {"lo1": "PASS", "lo2": "PASS"}, guards
    assert guards["lo1"].expected.startswith("lo1 connects to t-serve-0-node1 127.0.0.2:")


def test_over_ssh_a_node_without_a_route_to_its_leader_fails(tmp_path, monkeypatch) -> None:
    if "node2" not in sshd_hosts():
        pytest.skip("no network-namespace hosts")
    # No connection can arrive: each listener would wait out its whole lifetime (15 s).
    monkeypatch.setattr("pdctl.preflight.group.LISTEN_S", 2.0)
    found = _gather_group(tmp_path, ["node1", "node2"], ["0.33.0", "0.33.0"])
    (reach,) = by_check(found, "group.reach")
    # pdctl-n1 and pdctl-n2 have no route to each other (tests/services.sh).
    assert reach.status == "FAIL" and reach.where == "node2", reach
    assert reach.found.startswith("ENETUNREACH (route: RTNETLINK answers: Network is unreachable")
    (version,) = by_check(found, "group.vllm")
    assert version.status == "PASS"
    guards = by_check(found, "group.guard")  # neither reaches the other's guard port
    assert sorted((f.where, f.status) for f in guards) == [("node1", "FAIL"), ("node2", "FAIL")]
    assert all("guardPort" not in f.fix and "TCP" in f.fix for f in guards), guards


def test_a_taken_port_that_answers_the_nodes_only_warns() -> None:
    """Preflight after `up`: the running group holds the port and the nodes reach it."""
    busy = {
        "a": {LISTEN: "group t-serve-0\nbind-error 29501 Address already in use\n"},
        "b": REACHED["b"],
    }
    found = {f.where: f for f in by_check(check(with_raw(busy)), "group.reach")}
    assert found["a"].status == "WARN" and "running already" in found["a"].fix
    assert found["b"].status == "PASS"


# group.memlock reads the limit where the engines will run (memlock_command): a systemd unit's
# limit is systemd's, never limits.conf's, so preflight measures it in a transient unit with the
# rendered units' LimitMEMLOCK=infinity and names that context and its fix.
RDMA = ", rdmaDevices: [mlx5_0]"


def test_the_context_line_is_read_and_named() -> None:
    text = "context a user unit of alice, its service manager's hard limit\n8192\n"
    assert parse_memlock(text) == 8192
    assert parse_memlock_where(text) == "a user unit of alice, its service manager's hard limit"
    assert parse_memlock_where("8192\n") == ""  # a recording from before the context line
    (b,) = by_check(check(with_raw({"b": {MEMLOCK: text}}), RDMA), "group.memlock")
    assert b.status == "FAIL"
    want = "ulimit -l: 8192 KiB (in a user unit of alice, its service manager's hard limit)"
    assert b.found == want
    assert "user@.service" in b.fix
    system = "context a system unit\nunlimited\n"
    (ok,) = by_check(check(with_raw({"b": {MEMLOCK: system}}), RDMA), "group.memlock")
    assert ok.status == "PASS" and ok.found == "ulimit -l: unlimited (in a system unit)"
    login = "context the login shell\n8192\n"
    (shell,) = by_check(check(with_raw({"b": {MEMLOCK: login}}), RDMA), "group.memlock")
    assert shell.found == "ulimit -l: 8192 KiB" and "limits.conf" in shell.fix


def test_systemd_hosts_are_measured_in_a_unit_nohup_hosts_in_the_login_shell() -> None:
    unit = memlock_command(Host(name="a", address="192.0.2.1", runtime="venv", venv="/v"))
    assert "systemd-run" in unit and "LimitMEMLOCK=infinity" in unit
    nohup = Host(name="a", address="192.0.2.1", runtime="venv", venv="/v", supervise="none")
    assert memlock_command(nohup) == "echo 'context the login shell'; ulimit -l"
