"""The environment pdctl gives a Mooncake-over-TCP engine lets the transfer engine pdctl installs
(mooncake-transfer-engine 0.3.13.post1; the test extra's non-CUDA build of it) carry the batch a
burst's decode step asks for. With Mooncake's defaults the same batch is refused and every later
one to that peer fails too (what stalled a burst of 32 on the GPU harness): that control run
fails the day a release changes it, and pdctl's setting is then to be read again.
Real engines, two processes on loopback (benchmarks/mooncake_tcp_batch.py)."""

from __future__ import annotations

import importlib.util
from importlib.metadata import version
from pathlib import Path

from pdctl.compat import MOONCAKE_VERSION
from pdctl.plan import make_plan
from pdctl.plan.kv import MOONCAKE_TCP_QUEUE_ENV, MOONCAKE_TCP_QUEUE_MAX
from pdctl.spec import load_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/phase2-mooncake-tcp.yaml"
BURST = ("100", "3000", "1", "100")  # a burst's step, then the small pulls after it


def batch_script():
    spec = importlib.util.spec_from_file_location(
        "mooncake_tcp_batch", ROOT / "benchmarks/mooncake_tcp_batch.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pdctls_mooncake_tcp_engines_carry_a_bursts_batch_that_the_defaults_refuse() -> None:
    assert version("mooncake-transfer-engine-non-cuda") == MOONCAKE_VERSION  # what pdctl installs
    m = batch_script()
    env = m.pdctl_env(EXAMPLE)
    assert env == {MOONCAKE_TCP_QUEUE_ENV: str(MOONCAKE_TCP_QUEUE_MAX)}

    defaults, log = m.run({}, BURST)
    assert [r["ret"] for r in defaults] == [0, -1, -1, -1], defaults
    assert "TCP lane queue-full rejection count" in log

    planned, log = m.run(env, (*BURST, "25000"))
    assert [r["ret"] for r in planned] == [0] * 5, (planned, log[-2000:])
    assert "queue-full" not in log


def test_the_queue_is_set_for_tcp_only_and_a_users_value_wins() -> None:
    m = batch_script()
    text = EXAMPLE.read_text()
    rdma = ROOT / "examples/phase2-mooncake-rdma.yaml"
    assert MOONCAKE_TCP_QUEUE_ENV not in m.pdctl_env(rdma)
    own = text.replace("\nengine:\n",
                       f"\nengine:\n  env:\n    {MOONCAKE_TCP_QUEUE_ENV}: '8192'\n", 1)
    assert own != text
    spec, _ = load_text(own, "spec.yaml")
    envs = [dict(i.env) for i in make_plan(spec).instances if i.role in ("prefill", "decode")]
    assert envs and all(e[MOONCAKE_TCP_QUEUE_ENV] == "8192" for e in envs)
