"""Phase 0 front door: a `router` section puts vllm-router in plain mode in front of the
replicas (plan: --worker-urls, the policy, the listen rules, ports; refusals in one line)."""

from __future__ import annotations

import pytest
import yaml

from pdctl.errors import SpecError
from pdctl.render import render
from pdctl.targets.hosts.target import endpoints
from pdctl.targets.state import Desired
from tests.conftest import ROOT
from tests.helpers import plan_of
from tests.preflight.conftest import pdctl

HOST = {"name": "a", "address": "192.0.2.30", "gpus": [0, 1], "runtime": "venv", "venv": "/v"}


def spec(replicas: int = 2, hosts: list | None = None, **router: object) -> dict:
    doc = {
        "name": "fd", "phase": 0, "model": {"name": "m/m"}, "hosts": hosts or [HOST],
        "serve": {"replicas": replicas, "port": 8000}, "router": {"port": 8080, **router},
    }
    return doc


def router_of(plan):
    (svc,) = plan.services
    return svc


def test_replicas_on_one_host_sit_behind_a_loopback_router_last_in_start_order():
    plan = plan_of(spec(policy="cache_aware"))
    svc = router_of(plan)
    args = list(svc.command)
    assert args[: args.index("--policy") + 2] == [
        "vllm-router", "--host", "127.0.0.1", "--port", "8080", "--worker-urls",
        "http://192.0.2.30:8000", "http://192.0.2.30:8001", "--policy", "cache_aware",
    ]
    assert "--vllm-pd-disaggregation" not in args
    assert args[args.index("--health-failure-threshold") + 1] == "2"
    assert [u.role for u in plan.units] == ["serve", "serve", "router"]
    assert svc.wait_urls == ("http://192.0.2.30:8000/health", "http://192.0.2.30:8001/health")


def test_the_example_listens_on_the_router_hosts_address_and_up_prints_only_it():
    plan = plan_of((ROOT / "examples" / "phase0-replicas-router.yaml").read_text())
    svc = router_of(plan)
    assert svc.address == "192.0.2.20" and svc.host.name == "gpu-a"
    urls = list(svc.command[svc.command.index("--worker-urls") + 1 : svc.command.index("--policy")])
    assert len(urls) == 4 and {u.rsplit(":", 1)[0] for u in urls} == {
        "http://192.0.2.20", "http://192.0.2.21"}
    desired = [Desired(u.host, u.name, u.role, "", u.port) for u in plan.units]
    assert endpoints(plan, desired) == ["http://192.0.2.20:8080/v1"]
    ports = render(plan)["ports.md"]
    assert "| gpu-b | 192.0.2.21 | 8000 | the router |" in ports
    assert "forwards the\nclient's headers, `Authorization` included" in ports


def test_an_api_key_is_left_to_the_engines_not_given_to_the_router():
    doc = spec(hosts=[HOST, {**HOST, "name": "b", "address": "192.0.2.31"}], replicas=2)
    doc["secrets"] = {"apiKey": {"env": "KEY"}}
    plan = plan_of(doc)  # PD mode would refuse a router reachable off-host with the key
    svc = router_of(plan)
    assert svc.address == "192.0.2.30" and svc.api_key is False
    assert "OPENAI_API_KEY" not in render(plan)["hosts/a/fd-router/run.sh"]


def test_without_a_router_section_nothing_is_in_front():
    doc = spec()
    del doc["router"]
    plan = plan_of(doc)
    assert plan.services == () and [u.role for u in plan.units] == ["serve", "serve"]


@pytest.mark.parametrize(
    ("doc", "path", "words"),
    [
        (spec(replicas=1), "router", "a router in front of one engine spreads nothing"),
        (spec(port=8001), "router.port", "port 8001 on host a is used by fd-serve-1"),
        (spec(metricsPort=8000), "router.metricsPort", "port 8000 on host a is used by"),
    ],
)
def test_refusals_name_the_field(doc, path, words):
    with pytest.raises(SpecError) as err:
        plan_of(doc)
    assert err.value.path == path and words in err.value.message


def test_a_policy_the_router_lacks_is_one_located_line(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec(policy="least_load"), sort_keys=False))
    out = pdctl("validate", str(path))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "router.policy" in line and "round_robin" in line and "sticky_least_loaded" in line
