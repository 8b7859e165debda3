"""The transfer machinery on this machine (local hosts, no SSH): the TCP agent with python3,
both ends on one host, a skipped pair, and cleanup when the listener cannot listen."""

from __future__ import annotations

import json
import socket
import subprocess
from dataclasses import replace
from pathlib import Path

from pdctl.plan import make_plan
from pdctl.preflight.run import Bounds, Options
from pdctl.preflight.transfer import open_host, pairs, parse_transfer, run_pair, transfer_pairs
from pdctl.spec import load_text
from tests.targets.testbed import free_port


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
    return make_plan(load_text(text, "s.yaml")[0])


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
    from pdctl.errors import PdctlError
    from pdctl.preflight.transfer import cause

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
    import os

    import pytest

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
    from pdctl.preflight.transfer import cause

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
