"""A host reached by other hosts at a loopback peer address would have them reach their own
loopback: refused in one line naming the host, what connects there and the field to set."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pdctl.errors import SpecError
from tests.helpers import plan_of
from tests.preflight.conftest import pdctl

BASE = {
    "name": "lp", "phase": 2,
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "maxModelLen": 8192},
    "prefill": {"replicas": 1}, "decode": {"replicas": 1}, "router": {"port": 8000, "host": "a"},
}


def _spec(connector: str, a: str, b: str, pins: bool = True) -> dict:
    spec = dict(BASE, engine={"version": "0.23.0" if connector == "p2p-nccl" else "0.33.0"})
    spec["disaggregation"] = {"connector": connector}
    spec["hosts"] = [
        {"name": "a", "address": a, "port": 2222, "gpus": [0]},
        {"name": "b", "address": b, "port": 2223, "gpus": [0]},
    ]
    if pins:
        spec["prefill"] = {"replicas": 1, "hosts": ["a"]}
        spec["decode"] = {"replicas": 1, "hosts": ["b"]}
    return spec


@pytest.mark.parametrize("connector", ["p2p-nccl", "nixl", "mooncake"])
def test_a_remote_host_connecting_to_a_loopback_peer_is_refused(connector: str) -> None:
    with pytest.raises(SpecError) as err:
        plan_of(_spec(connector, "127.0.0.1", "198.51.100.7"))
    assert err.value.path == "hosts[0].address"
    assert (
        "host a's peer address 127.0.0.1 is loopback: host b (198.51.100.7) would reach "
        "its own" in str(err.value)
    )


@pytest.mark.parametrize("connector", ["p2p-nccl", "nixl", "mooncake"])
def test_one_machine_listed_twice_on_loopback_is_accepted(connector: str) -> None:
    """Test rigs: one machine's sshd on two ports, both at 127.0.0.1."""
    plan = plan_of(_spec(connector, "127.0.0.1", "127.0.0.1"))
    assert {i.host.name for i in plan.instances if i.host} == {"a", "b"}


def test_addressforpeers_fixes_it() -> None:
    spec = _spec("nixl", "127.0.0.1", "198.51.100.7")
    spec["hosts"][0]["addressForPeers"] = "198.51.100.6"
    assert plan_of(spec).instances


def test_a_loopback_router_host_sending_to_remote_engines_is_accepted() -> None:
    """NIXL: only the router connects across hosts, and it connects out: its own host may be
    loopback (a router on the machine pdctl runs from, engines elsewhere)."""
    spec = _spec("nixl", "127.0.0.1", "198.51.100.7")
    spec["hosts"].append({"name": "c", "address": "198.51.100.8", "gpus": [0]})
    spec["prefill"] = {"replicas": 1, "hosts": ["c"]}
    assert plan_of(spec).instances
    spec["disaggregation"] = {"connector": "p2p-nccl"}
    spec["engine"] = {"version": "0.23.0"}
    with pytest.raises(SpecError, match="registers with the router's proxy"):
        plan_of(spec)


def test_the_cli_names_the_file_line_and_fix(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_spec("p2p-nccl", "127.0.0.1", "198.51.100.7"), sort_keys=False))
    proc = pdctl("validate", str(path))
    assert (proc.returncode, proc.stdout) == (2, ""), proc
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}:"), line
    assert ": hosts[0].address: " in line and line.endswith(
        "set hosts[0].addressForPeers to the address b reaches a on"
    ), line
