"""The network preflight for real: `pdctl preflight` between two network-namespace sshd hosts
moves bytes with the real NIXL 1.5.1 (UCX over TCP, host memory) of the vLLM CPU environment
(tests/e2e/prepare_vllm_cpu.sh); the decode namespace's firewall dropping the port, an
interface the spec names that a host lacks, and Ctrl-C in the middle. Nothing is left behind
on any path.

The namespace hosts of tests/services.sh (node1, node2) have no route to each other (other
tests rely on that): the transfers run between two namespaces of this file's own, `node1` and
`node2` too, each with an sshd (tests/targets/faulthost.py) and a default route through this
machine; the services' pair shows the `route` cause."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pdctl.plan import make_plan
from pdctl.preflight.run import Bounds, Options
from pdctl.preflight.transfer import open_host, pairs, parse_transfer, run_pair
from pdctl.spec import load_text
from pdctl.targets.ssh import SshOptions
from tests.conftest import ROOT
from tests.helpers import wait_until
from tests.preflight.conftest import json_findings, pdctl
from tests.preflight.sshd_hosts import sshd_hosts
from tests.targets.faulthost import start_fault_host, stop_fault_host
from tests.targets.testbed import ssh_env_or_skip

PORT = 25731  # the decode's NIXL side channel: the port the listener binds on node2
AGENT = "agent.py (listen|send) --transport"


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory):
    """(hosts, known_hosts file, decode namespace): two namespace hosts routed to each other."""
    env = ssh_env_or_skip()
    tmp = tmp_path_factory.mktemp("xfer-netns")
    made = []
    try:
        for name in ("node1", "node2"):
            made.append(start_fault_host(env, tmp, name, route=True))
        known = tmp / "known_hosts"
        known.write_text(Path(made[0].known_hosts).read_text()
                         + Path(made[1].known_hosts).read_text().splitlines()[-1] + "\n")
        hosts = {f.host.name: (f.host.address, f.host.port) for f in made}
        yield hosts, str(known), made[1].netns
    finally:
        for fault in made:
            stop_fault_host(fault)


def engine_venv(module: str) -> Path:
    d = os.environ.get("PDCTL_TEST_VLLM_DIR")
    py = Path(d or "/nonexistent") / "venv" / "bin" / "python"
    if not d or not py.exists() or subprocess.run([str(py), "-c", f"import {module}"],
                                                  capture_output=True).returncode:
        pytest.skip(f"no vLLM CPU environment with {module}: tests/e2e/prepare_vllm_cpu.sh DIR "
                    "and PDCTL_TEST_VLLM_DIR=DIR")
    return py.parent.parent


@pytest.fixture
def venv() -> Path:
    return engine_venv("nixl")


@pytest.fixture
def torch_venv() -> Path:
    return engine_venv("torch")


def write_spec(tmp: Path, hosts: dict[str, tuple[str, int]], venv: Path,
               ucx_device: str = "eth0") -> Path:
    key = os.environ["PDCTL_TEST_SSH_KEY"]
    lines = [
        f"  - {{name: {n}, address: '{hosts[n][0]}', port: {hosts[n][1]}, user: root, "
        f"identityFile: '{key}', runtime: venv, venv: '{venv}', dataDir: '{tmp}/data-{n}'}}"
        for n in ("node1", "node2")
    ]
    spec = tmp / "spec.yaml"
    spec.write_text(
        "name: xfer\nphase: 2\n"
        f"model: {{name: '{venv.parent / 'tiny'}', servedName: tiny, maxModelLen: 256}}\n"
        "engine:\n  version: '0.33.0'\n  device: cpu\n"
        f"  env: {{UCX_TLS: tcp, UCX_NET_DEVICES: {ucx_device}}}\n"
        "hosts:\n" + "\n".join(lines) + "\n"
        "prefill: {replicas: 1, hosts: [node1], port: 25700}\n"
        "decode: {replicas: 1, hosts: [node2], port: 25710}\n"
        f"disaggregation: {{connector: nixl, sideChannelPort: {PORT}}}\n"
    )
    return spec


def preflight(spec: Path, known: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return pdctl("preflight", str(spec), "-o", "json", "--known-hosts", known,
                 "--transfer-bytes", "32MiB", *extra)


def transfer_row(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    (row,) = [f for f in json_findings(proc) if f["check"] == "net.transfer"]
    assert row["where"] == "node1 -> node2"
    return row


def leftovers() -> list[str]:
    """Transfer agents still running, and agent folders still on disk (the namespace hosts
    share this machine's processes and files)."""
    ps = subprocess.run(["pgrep", "-af", AGENT], capture_output=True, text=True).stdout
    return ps.splitlines() + [str(p) for p in Path("/tmp").glob("pdctl-xfer.*")]


def test_a_real_nixl_transfer_between_namespaces(tmp_path: Path, routed, venv) -> None:
    nodes, known, _ = routed
    spec = write_spec(tmp_path, nodes, venv)
    rec = tmp_path / "rec"
    proc = preflight(spec, known, "--record", str(rec))
    row = transfer_row(proc)
    assert row["status"] == "PASS", row
    assert row["found"].startswith("nixl: ") and " GB/s, latency " in row["found"]
    lines = [json.loads(x) for x in (rec / "node1" / "transfer-to-node2.jsonl").read_text()
             .splitlines()]
    results = {x["side"]: x for x in lines if x["event"] == "result"}
    assert results["listen"]["verified"] and results["listen"]["notified"]
    assert results["listen"]["peer"] == nodes["node1"][0]  # it came from node1's namespace
    assert results["send"]["bytes"] == 32 << 20
    assert {x["python"] for x in lines if x["event"] == "start"} == {str(venv / "bin/python")}
    assert (rec / "node2" / "net-devices.txt").read_text().split()[0] == "eth0"
    again = pdctl("preflight", str(spec), "-o", "json", "--replay", str(rec))
    assert transfer_row(again) == row
    assert leftovers() == []


def test_no_transfer_flag_moves_nothing(tmp_path: Path, routed, venv) -> None:
    nodes, known, _ = routed
    spec = write_spec(tmp_path, nodes, venv)
    rec = tmp_path / "rec"
    proc = preflight(spec, known, "--no-transfer", "--record", str(rec))
    assert not [f for f in json_findings(proc) if f["check"] == "net.transfer"]
    assert not list(rec.glob("*/transfer-*"))


class Dropped:
    """The decode namespace's firewall drops TCP port PORT (iptables), always removed."""

    RULE = ["INPUT", "-p", "tcp", "--dport", str(PORT), "-j", "DROP"]

    def __init__(self, netns: str) -> None:
        self.ipt = ["ip", "netns", "exec", netns, "iptables"]

    def __enter__(self) -> Dropped:
        res = subprocess.run([*self.ipt, "-I", *self.RULE], capture_output=True, text=True)
        if res.returncode:
            pytest.skip(f"cannot add a firewall rule: {res.stderr.strip()}")
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run([*self.ipt, "-D", *self.RULE], check=True)


def test_a_dropped_port_fails_naming_the_pair_and_the_port(tmp_path, routed, venv) -> None:
    nodes, known, decode_ns = routed
    spec = write_spec(tmp_path, nodes, venv)
    rec = tmp_path / "rec"
    with Dropped(decode_ns):
        proc = preflight(spec, known, "--record", str(rec))
    assert proc.returncode == 1, proc.stderr
    row = transfer_row(proc)
    assert row["status"] == "FAIL"
    assert row["found"] == (f"nixl: not reached: firewall port: no answer from "
                            f"{nodes['node2'][0]}:{PORT} (TCP port {PORT} dropped)")
    assert f"--dport {PORT}" in row["fix"]
    assert leftovers() == []


def test_a_missing_interface_fails_before_any_transfer(tmp_path: Path, routed, venv) -> None:
    nodes, known, _ = routed
    spec = write_spec(tmp_path, nodes, venv, ucx_device="eth9")
    rec = tmp_path / "rec"
    proc = preflight(spec, known, "--record", str(rec))
    assert proc.returncode == 1, proc.stderr
    row = transfer_row(proc)
    assert row["status"] == "FAIL"
    assert row["found"].startswith("nixl: not reached: interface: UCX_NET_DEVICES=eth9 names "
                                   "no interface on node1 (it has eth0, lo)")
    events = [json.loads(x)["event"] for x in
              (rec / "node1" / "transfer-to-node2.jsonl").read_text().splitlines()]
    assert events == ["pair", "skipped"]  # no agent was started


def test_ctrl_c_leaves_no_agent_and_no_file(tmp_path: Path, routed, venv) -> None:
    nodes, known, decode_ns = routed
    spec = write_spec(tmp_path, nodes, venv)
    with Dropped(decode_ns):  # the sender keeps trying: the agents stay up until interrupted
        proc = subprocess.Popen(
            [sys.executable, "-m", "pdctl", "preflight", str(spec), "--known-hosts", known],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            def both() -> bool:  # until both agents run
                ps = subprocess.run(["pgrep", "-af", AGENT], capture_output=True, text=True).stdout
                return " send " in ps and " listen " in ps

            wait_until(both, "the agents", lambda: proc.poll() is None)
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode != 0
    assert leftovers() == []


def test_a_real_gloo_all_to_all_of_a_two_node_group(tmp_path, routed, torch_venv: Path) -> None:
    venv = torch_venv
    nodes, known, _ = routed
    key = os.environ["PDCTL_TEST_SSH_KEY"]
    lines = [
        f"  - {{name: {n}, address: '{nodes[n][0]}', port: {nodes[n][1]}, user: root, "
        f"identityFile: '{key}', runtime: venv, venv: '{venv}', dataDir: '{tmp_path}/d-{n}', "
        "networkInterface: eth0}"
        for n in ("node1", "node2")
    ]
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: grp\nphase: 0\n"
        f"model: {{name: '{venv.parent / 'tiny'}', servedName: tiny, maxModelLen: 256}}\n"
        "engine: {version: '0.33.0', device: cpu}\nhosts:\n" + "\n".join(lines) + "\n"
        "serve: {replicas: 1, nodes: 2, pipelineParallel: 2, rendezvousPort: 25790, "
        "port: 25780}\n"
    )
    rec = tmp_path / "rec"
    proc = preflight(spec, known, "--record", str(rec))
    (row,) = [f for f in json_findings(proc) if f["check"] == "net.alltoall"]
    assert (row["status"], row["where"]) == ("PASS", "grp-serve-0"), row
    assert row["found"].startswith("gloo: ") and "GB/s per node (slowest)" in row["found"]
    ranks = [json.loads(x) for x in (rec / "node1" / "group-transfer-grp-serve-0.jsonl")
             .read_text().splitlines()]
    done = {x["side"]: x for x in ranks if x["event"] == "result"}
    assert set(done) == {"rank0", "rank1"} and all(x["verified"] for x in done.values())
    assert leftovers() == []


def test_the_tcp_agent_runs_with_the_hosts_python3(tmp_path: Path, routed, venv) -> None:
    nodes, known, _ = routed
    """The transport of connectors without one of their own: plain sockets, python3 of the
    login shell, over the same upload, start and stop as the others."""
    plan = make_plan(load_text(write_spec(tmp_path, nodes, venv).read_text(), "s.yaml")[0])
    (pair,) = pairs(plan)
    options = Options(ssh=SshOptions(known_hosts=known))
    text = run_pair(plan, replace(pair, transport="tcp"), Bounds(8 << 20, 5.0),
                    lambda h: open_host(h, options, False))
    t = parse_transfer("node2", text)
    assert t.reached and t.verified and t.bytes == 8 << 20, text
    starts = [json.loads(x) for x in text.splitlines() if '"start"' in x]
    assert {x["python"] for x in starts} != {str(venv / "bin/python")}
    assert leftovers() == []


def test_the_services_namespaces_have_no_route_between_them(tmp_path: Path, venv) -> None:
    """tests/services.sh's node1 and node2: the cause is the route, named with the pair."""
    hosts = sshd_hosts()
    if "node1" not in hosts or "node2" not in hosts:
        pytest.skip("no network-namespace hosts (tests/services.sh could not create them)")
    spec = write_spec(tmp_path, hosts, venv)
    proc = pdctl("preflight", str(spec), "-o", "json", "--known-hosts",
                 os.environ["PDCTL_TEST_KNOWN_HOSTS"], "--transfer-bytes", "1MiB")
    assert proc.returncode == 1, proc.stderr
    row = transfer_row(proc)
    assert row["found"] == (f"nixl: not reached: route: {hosts['node2'][0]}:{PORT} "
                            "unreachable from the prefill host (ENETUNREACH)")
    assert leftovers() == []
