"""The environment pdctl gives a Mooncake-over-TCP engine lets the transfer engine pdctl installs
(mooncake-transfer-engine 0.3.13.post1; the test extra's non-CUDA build of it) carry the batch a
burst's decode step asks for. With Mooncake's defaults the same batch is refused (what stalled a
burst of 32 on the GPU harness): that control run fails the day a release changes it, and
pdctl's setting is then to be read again. Whether the small batches after the refusal are
refused too is a race in the engine (usually they are; in one CI run the queue drained in 0.08
s), so the control does not count on them; with pdctl's environment every one must pass.
Real engines, two processes on loopback (benchmarks/mooncake_tcp_batch.py)."""

from __future__ import annotations

import importlib.util
from importlib.metadata import version
from pathlib import Path

import pytest

from pdctl.compat import MOONCAKE_VERSION
from pdctl.plan.kv import MOONCAKE_TCP_QUEUE_ENV, MOONCAKE_TCP_QUEUE_MAX
from tests.conftest import ROOT
from tests.helpers import cli, plan_of, run_cli, written

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
    assert [r["ret"] for r in defaults][:2] == [0, -1], defaults
    assert len(defaults) == len(BURST), defaults  # the sender went on past the refusal
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
    envs = [dict(i.env) for i in plan_of(own).instances if i.role in ("prefill", "decode")]
    assert envs and all(e[MOONCAKE_TCP_QUEUE_ENV] == "8192" for e in envs)


def queue_in(where: str, value: str, protocol: str = "tcp") -> str:
    """examples/phase2-mooncake-tcp.yaml with the queue set in `where`'s env."""
    text = EXAMPLE.read_text().replace("protocol: tcp", f"protocol: {protocol}", 1)
    env = f"{MOONCAKE_TCP_QUEUE_ENV}: '{value}'"
    old, new = ((f"\n{where}:\n", f"\n{where}:\n  env:\n    {env}\n") if where == "engine"
                else (f"\n{where}: {{", f"\n{where}: {{env: {{{env}}}, "))
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize("value", ["65536", "0", "abc", " 4096", "4096x"])
def test_a_queue_mooncake_ignores_is_a_caution_where_it_is_set(value: str) -> None:
    """Mooncake 0.3.13.post1 logs "Invalid ... value" for each of these and keeps 1024."""
    (caution,) = plan_of(queue_in("engine", value)).cautions
    assert caution.path == f"engine.env.{MOONCAKE_TCP_QUEUE_ENV}"
    assert caution.message.startswith(f"Mooncake ignores {value!r} (it takes digits from 1 to "
                                      "65535) and keeps its default, 1024")
    assert caution.fix.startswith("remove it (pdctl sets 65535)")
    (caution,) = plan_of(queue_in("decode", value)).cautions
    assert caution.path == f"decode.env.{MOONCAKE_TCP_QUEUE_ENV}"


@pytest.mark.parametrize("value", ["1", "4096", "65535"])
def test_a_queue_mooncake_takes_or_rdma_has_no_caution(value: str) -> None:
    assert plan_of(queue_in("prefill", value)).cautions == ()
    rdma = plan_of(queue_in("engine", "65536", protocol="rdma")).cautions
    assert [c.path for c in rdma] == ["disaggregation.protocol"]  # the hosts list no HCAs


def test_validate_names_the_line_and_strict_refuses(tmp_path: Path) -> None:
    text = queue_in("engine", "65536")
    spec = written(tmp_path / "spec.yaml", text)
    line_no = text.splitlines().index(f"    {MOONCAKE_TCP_QUEUE_ENV}: '65536'") + 1
    _, err = cli(["validate", str(spec)])
    (warning,) = [w for w in err.splitlines() if "warning" in w]
    assert warning.startswith(f"{spec}:{line_no}: warning: engine.env.{MOONCAKE_TCP_QUEUE_ENV}: "
                              "Mooncake ignores '65536'")
    code, out, _ = run_cli(["validate", str(spec), "--strict"])
    assert code == 1 and out == ""
