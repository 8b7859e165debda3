"""Review fixes: pdctl's placement env cannot be overridden, strict patterns, IPv6 host:port."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pdctl.errors import SpecError
from pdctl.plan import make_plan
from pdctl.plan.kv import p2p_config
from pdctl.plan.pd import store_json
from pdctl.plan.router import router_service
from pdctl.spec import load_text
from pdctl.spec.pd import Disaggregation
from pdctl.spec.value import host_port
from tests.conftest import ROOT
from tests.helpers import plan_of
from tests.plan.test_errors import cli, edited, one_line_error

NIXL = ROOT / "examples/phase2-nixl-hosts.yaml"
STORE = ROOT / "examples/phase2-mooncake-store.yaml"
LLMD = ROOT / "examples/phase2-llmd.yaml"
P2P = ROOT / "examples/phase2-p2p-nccl.yaml"
V6A, V6B = "2001:db8::a", "2001:db8::b"


def spec_of(example: Path, change) -> str:
    doc = yaml.safe_load(example.read_text())
    change(doc)
    return yaml.safe_dump(doc, sort_keys=False)


def refused(text: str) -> SpecError:
    with pytest.raises(SpecError) as err:
        plan_of(text)
    return err.value


# 1. pdctl's own env values -------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "name", "fix_word"),
    [
        ("prefill", "VLLM_HOST_IP", "addressForPeers"),
        ("decode", "VLLM_NIXL_SIDE_CHANNEL_PORT", "sideChannelPort"),
        ("decode", "VLLM_NIXL_SIDE_CHANNEL_HOST", "addressForPeers"),
        ("engine", "VLLM_NIXL_SIDE_CHANNEL_PORT", "sideChannelPort"),
        ("engine", "VLLM_HOST_IP", "addressForPeers"),
    ],
)
def test_user_env_cannot_override_nixl_placement(
    tmp_path: Path, section: str, name: str, fix_word: str
) -> None:
    def change(d):
        d[section].setdefault("env", {})[name] = "10.9.9.9"

    line = one_line_error(cli("validate", str(edited(NIXL, tmp_path, change))))
    assert f"{section}.env.{name}: {name} is set by pdctl" in line
    assert fix_word in line and f"remove {name}" in line


@pytest.mark.parametrize(
    ("section", "name"),
    [
        ("prefill", "VLLM_MOONCAKE_BOOTSTRAP_PORT"), ("decode", "MOONCAKE_CONFIG_PATH"),
        ("engine", "MC_TCP_BIND_ADDRESS"),
    ],
)
def test_user_env_cannot_override_mooncake_placement(section: str, name: str) -> None:
    text = spec_of(STORE, lambda d: d.setdefault(section, {}).setdefault("env", {}).update(
        {name: "1"}
    ))
    err = refused(text)
    assert err.path == f"{section}.env.{name}"
    assert "set by pdctl" in str(err)


def test_kube_pod_ip_side_channel_host_cannot_be_overridden() -> None:
    text = spec_of(LLMD, lambda d: d["decode"].update(env={"VLLM_NIXL_SIDE_CHANNEL_HOST": "x"}))
    assert refused(text).path == "decode.env.VLLM_NIXL_SIDE_CHANNEL_HOST"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("CUDA_VISIBLE_DEVICES", "is set by pdctl"), ("HF_HOME", "is set by pdctl"),
        ("MY_API_KEY", "looks like a secret"), ("HF_TOKEN", "looks like a secret"),
        ("DB_PASSWORD", "looks like a secret"),
    ],
)
@pytest.mark.parametrize("section", ["prefill", "decode"])
def test_role_env_refuses_reserved_and_secret_names(
    tmp_path: Path, section: str, name: str, why: str
) -> None:
    spec = edited(NIXL, tmp_path, lambda d: d[section].update(env={name: "abc"}))
    line = one_line_error(cli("validate", str(spec)))
    assert f"{section}.env" in line and name in line and why in line


def test_role_env_refuses_non_ascii_names() -> None:
    text = spec_of(NIXL, lambda d: d["prefill"].update(env={"OMP_١": "1"}))
    assert refused(text).path.startswith("prefill.env")


def test_unrelated_role_env_is_kept_next_to_pdctls_values() -> None:
    text = spec_of(NIXL, lambda d: d["decode"].update(env={"VLLM_CPU_KVCACHE_SPACE": "4"}))
    decode = next(i for i in plan_of(text).instances if i.role == "decode")
    env = dict(decode.env)
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert env["VLLM_HOST_IP"] == "192.0.2.10"
    assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5601"
    assert env["UCX_TLS"] == "rc,ud,sm,self,cuda_copy,cuda_ipc"


# 2. strict patterns ----------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.1.١٧", "٠.1.17", "0.1.17\n", "0.1"])
def test_router_version_is_ascii_digits_only(version: str) -> None:
    text = spec_of(NIXL, lambda d: d["router"].update(version=version))
    assert refused(text).path == "router.version"


@pytest.mark.parametrize("timeout", ["٣٠٠s", "300s\n", "300"])
def test_request_timeout_is_a_strict_duration(timeout: str) -> None:
    text = spec_of(LLMD, lambda d: d["router"].update(requestTimeout=timeout))
    assert refused(text).path == "router.requestTimeout"


# 3. IPv6 host:port -----------------------------------------------------------------------


def test_host_port_brackets_ipv6_only() -> None:
    assert host_port(V6A, 8100) == f"[{V6A}]:8100"
    assert host_port("::1", "80") == "[::1]:80"
    assert host_port("10.0.0.1", 8100) == "10.0.0.1:8100"
    assert host_port("gpu-a.lan", 8100) == "gpu-a.lan:8100"


def test_router_urls_bracket_ipv6_engine_hosts() -> None:
    def change(d):
        d["hosts"][0]["address"] = V6A

    plan = plan_of(spec_of(NIXL, change))
    svc = router_service(plan)
    args = list(svc.command)
    assert args[args.index("--prefill") + 1] == f"http://[{V6A}]:8100"
    assert args[args.index("--decode") + 1] == f"http://[{V6A}]:8200"
    assert f"http://[{V6A}]:8100/health" in svc.wait_urls
    # vLLM brackets the NIXL side-channel host itself (make_zmq_path): the env stays bare.
    env = dict(plan.instances[0].env)
    assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == V6A


def test_mooncake_store_addresses_bracket_ipv6() -> None:
    def change(d):
        d["hosts"][0]["addressForPeers"] = V6A
        d["hosts"][1]["addressForPeers"] = V6B

    spec, _ = load_text(spec_of(STORE, change))
    doc = json.loads(store_json(spec, spec.hosts[1]))
    assert doc["metadata_server"] == f"http://[{V6A}]:8080/metadata"
    assert doc["master_server_address"] == f"[{V6A}]:50051"
    assert doc["local_hostname"] == V6B
    plan = make_plan(spec)
    prefill = next(i for i in plan.instances if i.role == "prefill")
    args = list(router_service(plan).command)
    assert f"http://[{prefill.host.address_for_peers}]:{prefill.port}" in args  # type: ignore


def test_p2p_proxy_ip_is_bracketed_for_ipv6() -> None:
    dis = Disaggregation(connector="p2p-nccl")
    cfg = p2p_config(dis, "decode", kv_port=21001, http_port=8200, proxy=(V6A, 30001))
    extra = cfg["kv_connector_extra_config"]
    assert extra["proxy_ip"] + ":" + extra["proxy_port"] == f"[{V6A}]:30001"


def test_p2p_nccl_refuses_ipv6_peers(tmp_path: Path) -> None:
    spec = edited(P2P, tmp_path, lambda d: d["hosts"][0].update(addressForPeers=V6A))
    line = one_line_error(cli("validate", str(spec)))
    assert "hosts[0].addressForPeers: p2p-nccl needs IPv4 peer addresses" in line


# 4. token Secrets through stdin ------------------------------------------------------------

PD_TEXTS = [
    *sorted(ROOT.glob("examples/phase[23]-*.yaml")),
    *sorted(ROOT.glob("templates/init-phase[23].yaml")), ROOT / "docs/phase2-bare-metal.md",
    ROOT / "docs/phase2-kubernetes.md", ROOT / "docs/phase3-hami.md",
]


@pytest.mark.parametrize("path", PD_TEXTS, ids=lambda p: p.name)
def test_token_secret_never_on_a_command_line(path: Path) -> None:
    text = path.read_text()
    assert "--from-literal=" not in text
    if "create secret" in text:
        # As templates/init-phase1.yaml: namespace first, the value through stdin.
        assert "--from-file=token=/dev/stdin" in text
        assert 'printf %s "$HF_TOKEN" |' in text
        assert text.index("kubectl create namespace") < text.index("create secret")


# 5. phase 3 prefill with TP > 1 on HAMi nodes ------------------------------------------------

HAMI = ROOT / "examples/phase3-hami.yaml"


@pytest.mark.parametrize(("phase", "tp", "expected"), [(3, 2, True), (3, 1, False), (2, 2, False)])
def test_hami_prefill_tp_uses_nccl_all_reduce(phase: int, tp: int, expected: bool) -> None:
    """HAMi-core is preloaded into whole-GPU prefill containers too (device plugin Allocate
    mounts /etc/ld.so.preload for every container it allocates): custom all-reduce is off."""
    text = spec_of(HAMI, lambda d: d["prefill"].update(tensorParallel=tp))
    prefill = next(i for i in plan_of(text, phase=phase).instances if i.role == "prefill")
    assert ("--disable-custom-all-reduce" in prefill.args) is expected
