"""Mooncake `deviceName` against the vLLM that will read it (issue 36): vLLM up to 0.24.0
passes "" to the transfer engine whatever kv_connector_extra_config says (0.23.0
mooncake_connector.py l.765, `self.engine.initialize(self.hostname, "P2PHANDSHAKE",
protocol, "")`), 0.25.0 on read `device_name`. So pdctl renders it only where it is read,
preflight says on 0.23.0 that Mooncake picks the NICs itself (and tests what it will pick),
and the transfer preflight registers GPU memory where the engines register theirs."""

from __future__ import annotations

import json

from pdctl.plan import make_plan
from pdctl.preflight.run import Bounds
from pdctl.preflight.transfer import agent_args, pairs
from pdctl.spec import load_text
from tests.preflight.conftest import by_check, findings
from tests.preflight.test_transfer import spec as transfer_spec

RDMA = ", protocol: rdma, deviceName: mlx5_0"
IB = {"sys-class-infiniband.txt": "mlx5_0\nmlx5_1\n",
      "infiniband-ports.txt": "mlx5_0 1 4:ACTIVE InfiniBand\nmlx5_1 1 4:ACTIVE InfiniBand\n"}


def spec(version: str, extra: str = RDMA) -> str:
    return transfer_spec("mooncake", extra=extra).replace("'0.23.0'", f"'{version}'")


def plan_of(version: str, extra: str = RDMA):
    s, _ = load_text(spec(version, extra), "s.yaml")
    return make_plan(s)


def kv_extra(version: str) -> dict:
    inst = next(i for i in plan_of(version).instances if i.role == "decode")
    args = list(inst.args)
    doc = json.loads(args[args.index("--kv-transfer-config") + 1])
    return doc["kv_connector_extra_config"]


def test_device_name_is_rendered_only_for_a_vllm_that_reads_it():
    assert kv_extra("0.23.0") == {"mooncake_protocol": "rdma"}
    assert kv_extra("0.33.0") == {"mooncake_protocol": "rdma", "device_name": "mlx5_0"}


def test_preflight_says_vllm_0_23_ignores_device_name_and_checks_what_mooncake_picks():
    raw = {"gpu-a": dict(IB), "gpu-b": dict(IB)}
    old = {f.where: f for f in by_check(findings(spec("0.23.0"), raw), "host.rdma")}
    assert old["gpu-a"].status == "WARN"
    assert ("vLLM 0.23.0's MooncakeConnector ignores deviceName mlx5_0 (it passes \"\" to the "
            "transfer engine; read from 0.25.0 on)") in old["gpu-a"].found
    assert "MC_TE_FILTERS=mlx5_0" in old["gpu-a"].fix
    assert old["gpu-a"].expected == "an RDMA device with an ACTIVE port"  # what it will pick
    new = {f.where: f for f in by_check(findings(spec("0.33.0"), raw), "host.rdma")}
    assert new["gpu-a"].status == "PASS"
    assert new["gpu-a"].expected == "RDMA device mlx5_0 with an ACTIVE port"


def test_the_transfer_agent_gets_the_devices_the_engine_passes_and_gpu_memory():
    def args(version: str) -> list[str]:
        plan = plan_of(version)
        (pair,) = pairs(plan)
        return agent_args(plan, pair, "send", Bounds(1 << 20, 1.0))

    old, new = args("0.23.0"), args("0.33.0")
    assert old[old.index("--rdma-devices") + 1] == ""  # Mooncake finds them, as in vLLM
    assert new[new.index("--rdma-devices") + 1] == "mlx5_0"
    assert new[new.index("--device") + 1] == "cuda"  # the engines register GPU KV caches


def test_the_transfer_finding_names_the_memory_each_side_registered():
    from pdctl.preflight.transfer import parse_transfer

    lines = [
        {"event": "pair", "prefill": "gpu-a", "decode": "gpu-b", "transport": "mooncake",
         "address": "192.0.2.11", "port": 8998, "bytes": 1 << 20, "seconds": 1.0},
        {"event": "result", "side": "listen", "bytes": 1 << 30, "seconds": 0.1, "gbps": 10.7,
         "latency_us": 12.0, "verified": True,
         "memory": "GPU (cuda:0) -> GPU (cuda:0)"},
    ]
    t = parse_transfer("gpu-a", "".join(json.dumps(x) + "\n" for x in lines))
    assert t.memory == "GPU (cuda:0) -> GPU (cuda:0)"
    from pdctl.preflight.facts import Facts
    from pdctl.preflight.transfer import transfers
    from tests.preflight.conftest import facts_from

    facts: Facts = facts_from({"gpu-a": {"transfer-to-gpu-b.jsonl": "".join(
        json.dumps(x) + "\n" for x in lines)}, "gpu-b": {}})
    (f,) = transfers(plan_of("0.33.0"), facts, None)
    assert f.found.endswith(", GPU (cuda:0) -> GPU (cuda:0) memory"), f.found
