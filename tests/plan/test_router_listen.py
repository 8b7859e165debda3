"""Where the router and mooncake_master listen (pdctl issue 10, item 3): never every address
unless the spec says so, and secrets.apiKey refused behind a router others can reach
(vllm-router 0.1.17 authenticates no client and forwards with the engines' key)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pdctl.errors import SpecError
from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text
from tests.conftest import ROOT
from tests.helpers import plan_of, run_cli, written

HOST_EXAMPLES = sorted(p for p in (ROOT / "examples").glob("phase2-*.yaml") if "llmd" not in p.name)


def spec_of(**over) -> dict:
    doc: dict = {
        "name": "rl",
        "phase": 2,
        "model": {"name": "org/m"},
        "engine": {"version": "0.33.0"},
        "hosts": [
            {"name": "a", "address": "10.0.0.1", "addressForPeers": "192.168.0.1", "gpus": [0]},
            {"name": "b", "address": "10.0.0.2", "gpus": [0]},
        ],
        "prefill": {"replicas": 1},
        "decode": {"replicas": 1},
        "disaggregation": {"connector": "mooncake", "store": {"enabled": True}},
    }
    doc.update(over)
    return doc


def files(plan) -> dict[str, str]:
    return {a.path: a.text for a in render(plan)}


def flag(command: tuple[str, ...], name: str) -> str:
    return command[command.index(name) + 1]


def by_role(doc: dict) -> dict:
    return {s.role: s for s in plan_of(doc).services}


@pytest.mark.parametrize(
    ("over", "address"),
    [
        ({}, "192.168.0.1"),  # across hosts: its host's peer address
        ({"hosts": [{"name": "a", "address": "10.0.0.1", "gpus": [0, 1]}]}, "127.0.0.1"),  # one
    ],
)
def test_router_listens_on_its_hosts_peer_address_or_loopback(over: dict, address: str) -> None:
    router = by_role(spec_of(**over))["router"]
    assert flag(router.command, "--host") == address
    assert flag(router.command, "--prometheus-host") == address
    assert router.health == f"http://{address}:8090/liveness"


def test_explicit_listen_is_used_even_every_address() -> None:
    router = by_role(spec_of(router={"listen": "0.0.0.0"}))["router"]
    assert flag(router.command, "--host") == "0.0.0.0"
    assert router.health == "http://127.0.0.1:8090/liveness"  # probed from the host itself
    router = by_role(spec_of(router={"listen": "::1"}))["router"]
    assert router.health == "http://[::1]:8090/liveness"


def test_master_binds_the_peer_address() -> None:
    master = by_role(spec_of())["master"]
    assert "--rpc_address=192.168.0.1" in master.command
    assert "--metrics_host=192.168.0.1" in master.command
    assert "--http_metadata_server_host=192.168.0.1" in master.command


def test_p2p_discovery_binds_where_the_engines_register() -> None:
    doc = spec_of(engine={"version": "0.23.0"}, disaggregation={"connector": "p2p-nccl"})
    plan = plan_of(doc)
    router = next(s for s in plan.services if s.role == "router")
    assert flag(router.command, "--vllm-discovery-address") == "192.168.0.1:30001"
    proxies = {i.args[i.args.index("--kv-transfer-config") + 1] for i in plan.instances}
    assert all('"proxy_ip":"192.168.0.1"' in p for p in proxies)


@pytest.mark.parametrize("example", HOST_EXAMPLES, ids=lambda p: p.stem)
def test_no_host_example_listens_on_every_address(example: Path) -> None:
    spec, _ = load_text(example.read_text(), example.name)
    for svc in make_plan(spec).services:
        assert not any("0.0.0.0" in arg for arg in svc.command), (svc.name, svc.command)


def test_api_key_with_a_reachable_router_is_refused(capsys, tmp_path: Path) -> None:
    doc = spec_of(secrets={"apiKey": {"env": "VLLM_API_KEY"}})
    path = written(tmp_path / "spec.yaml", yaml.safe_dump(doc, sort_keys=False))
    code, out, err = run_cli(["validate", str(path)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: {path}:"), err
    assert (
        "router.listen: secrets.apiKey protects the engines, but vllm-router 0.1.17 has no "
        "client authentication and forwards with the key: anyone who reaches "
        "192.168.0.1:8090 is authenticated; set router.listen to an address only trusted "
        "clients reach (127.0.0.1 with an SSH tunnel or a proxy in front), or remove "
        "secrets.apiKey" in err
    ), err
    code, _, err = run_cli(["render", str(path)], capsys)
    assert code == 2 and "secrets.apiKey" in err


@pytest.mark.parametrize(
    "over",
    [
        {"router": {"listen": "192.168.0.1"}},  # an address the user owns
        {"router": {"listen": "127.0.0.1"}},
        {"hosts": [{"name": "a", "address": "10.0.0.1", "gpus": [0, 1]}]},  # loopback default
    ],
)
def test_api_key_allowed_with_an_explicit_or_loopback_router(over: dict) -> None:
    plan = plan_of(spec_of(secrets={"apiKey": {"env": "VLLM_API_KEY"}}, **over))
    router = next(s for s in plan.services if s.role == "router")
    assert router.api_key


def test_listen_must_be_an_ip_address() -> None:
    with pytest.raises(SpecError) as err:
        plan_of(spec_of(router={"listen": "gpu-a.lan"}))
    assert err.value.path.startswith("router.listen") and "not an IP address" in err.value.line()


def test_dns_peer_address_needs_an_explicit_listen() -> None:
    hosts = [
        {"name": "a", "address": "gpu-a.lan", "gpus": [0]},
        {"name": "b", "address": "10.0.0.2", "gpus": [0]},
    ]
    doc = spec_of(hosts=hosts, disaggregation={"connector": "nixl"})
    with pytest.raises(SpecError) as err:
        plan_of(doc)
    assert err.value.path == "router.listen" and "'gpu-a.lan'" in err.value.message
    router = by_role({**doc, "router": {"listen": "10.0.0.1"}})["router"]
    assert flag(router.command, "--host") == "10.0.0.1"


def test_ports_md_says_the_router_checks_no_client() -> None:
    ports = files(
        plan_of(
            spec_of(router={"listen": "192.168.0.1"}, secrets={"apiKey": {"env": "VLLM_API_KEY"}})
        )
    )["ports.md"]
    assert "vllm-router 0.1.17 has no client authentication" in ports
    assert "anyone who reaches 192.168.0.1:8090 is authenticated to the engines" in ports
    assert "| a | 192.168.0.1 (`router.listen`) | 8090 | clients |" in ports
    assert "| a | 192.168.0.1 | 50051 | engine hosts | mooncake_master RPC |" in ports
    local = files(plan_of(spec_of(router={"listen": "127.0.0.1"})))["ports.md"]
    assert "| 8090 | this host only (an SSH tunnel or a proxy) |" in local
    assert "ssh -N -L 8090:127.0.0.1:8090 10.0.0.1" in local
