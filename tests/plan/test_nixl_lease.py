"""NixlConnector's KV lease (issue 36): on bare metal every NIXL engine gets
kv_connector_extra_config.kv_lease_duration = NIXL_KV_LEASE_S, so a prefill keeps a finished
request's KV blocks past the hold a restarted peer's first handshake takes, instead of vLLM's
30 s after which a late decode reads freed blocks (HTTP 200, wrong tokens)."""

from __future__ import annotations

import json

from pdctl.plan import make_plan
from pdctl.plan.kv import MOONCAKE_TIMEOUT_ENV, NIXL_KV_LEASE_S, kv_lease_s, nixl_config
from pdctl.spec import load_text
from pdctl.spec.workload import Workload
from tests.conftest import ROOT

NIXL = ROOT / "examples/phase2-nixl-hosts.yaml"
LLMD = ROOT / "examples/phase2-llmd.yaml"


def kv_configs(path, workload: str = "") -> dict[str, dict]:
    spec, _ = load_text(path.read_text() + workload)
    plan = make_plan(spec)
    out = {}
    for inst in plan.instances:
        args = list(inst.args)
        out[inst.role] = json.loads(args[args.index("--kv-transfer-config") + 1])
    return out


def test_bare_metal_nixl_engines_carry_pdctl_lease_above_vllm_default() -> None:
    cfgs = kv_configs(NIXL)
    assert set(cfgs) == {"prefill", "decode"}
    for cfg in cfgs.values():
        assert cfg["kv_connector"] == "NixlConnector"
        assert cfg["kv_connector_extra_config"] == {"kv_lease_duration": NIXL_KV_LEASE_S}
    # vLLM's default is 30 s (0.23.0 nixl/scheduler.py); holds measured on the CPU e2e
    # deployment after a restart reached 30-62 s
    assert NIXL_KV_LEASE_S > 62


def test_nixl_config_without_lease_leaves_vllm_default() -> None:
    assert nixl_config("kv_producer", "cpu") == {
        "kv_connector": "NixlConnector", "kv_role": "kv_producer", "kv_buffer_device": "cpu",
    }
    assert nixl_config("kv_consumer", None, 90)["kv_connector_extra_config"] == {
        "kv_lease_duration": 90
    }


def test_lease_follows_the_plans_expected_hold() -> None:
    """Handshake (60 s) + two generations of the workload's mean output at its TPOT: long
    answers hold a request longer in the decode's queue, so the lease grows with them."""
    assert "workload:" not in NIXL.read_text()
    cfgs = kv_configs(NIXL, "workload:\n  outputTokens: 4096\n  tpotMs: 50\n")
    for cfg in cfgs.values():  # 60 + 2 x 4096 x 0.05 = 469.6 s
        assert cfg["kv_connector_extra_config"] == {"kv_lease_duration": 470}
    # short answers keep the floor; no TPOT target means a slow 100 ms step
    assert kv_lease_s(Workload(output_tokens=256, tpot_ms=20)) == NIXL_KV_LEASE_S
    assert kv_lease_s(Workload(output_tokens=2000)) == 460
    assert kv_lease_s(None) == NIXL_KV_LEASE_S


MOONCAKE = ROOT / "examples/phase2-mooncake-tcp.yaml"


def mooncake_timeouts(extra: str = "") -> dict[str, str | None]:
    spec, _ = load_text(MOONCAKE.read_text() + extra)
    out: dict[str, str | None] = {}
    for i in make_plan(spec).instances:
        if i.role in ("prefill", "decode"):
            value = dict(i.env).get(MOONCAKE_TIMEOUT_ENV)
            assert out.setdefault(i.role, value) == value  # the same on every instance
    return out


def test_mooncake_engines_hold_kv_as_long_as_the_plan_expects_not_vllms_480_s() -> None:
    """VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT is Mooncake's lease (vLLM 0.23.0 envs.py, 480 s):
    prefill's expiry of unsent KV and decode's wait for prefill (tests/fixtures/gpu/
    vllm023-h100-e: a stalled burst held decode's requests and KV for the whole of it)."""
    assert "workload:" not in MOONCAKE.read_text()
    assert mooncake_timeouts() == {"prefill": "240", "decode": "240"}  # every instance
    long = mooncake_timeouts("workload:\n  outputTokens: 4096\n  tpotMs: 50\n")
    assert long == {"prefill": "470", "decode": "470"}


def test_a_users_mooncake_timeout_wins() -> None:
    text = MOONCAKE.read_text()
    assert "\nengine:\n" in text
    spec, _ = load_text(text.replace(
        "\nengine:\n", f"\nengine:\n  env:\n    {MOONCAKE_TIMEOUT_ENV}: '900'\n", 1))
    envs = [dict(i.env) for i in make_plan(spec).instances if i.role in ("prefill", "decode")]
    assert envs and all(e[MOONCAKE_TIMEOUT_ENV] == "900" for e in envs)
