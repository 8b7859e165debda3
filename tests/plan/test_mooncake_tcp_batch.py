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
from pdctl.plan.mooncake_tcp import (
    ADMISSION,
    CAPACITY,
    PENDING,
    QUEUE,
    SETTINGS,
    TRANSFER,
    Setting,
    transfer_s,
)
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
    assert env == {QUEUE.env: "65535", PENDING.env: "65535", ADMISSION.env: "240000",
                   TRANSFER.env: "240"}

    defaults, log = m.run({}, BURST)
    assert [r["ret"] for r in defaults][:2] == [0, -1], defaults
    assert len(defaults) == len(BURST), defaults  # the sender went on past the refusal
    assert "TCP lane queue-full rejection count" in log

    planned, log = m.run(env, (*BURST, "25000", str(CAPACITY)))
    assert [r["ret"] for r in planned] == [0] * 6, (planned, log[-2000:])
    assert "queue-full" not in log


def test_the_pending_admissions_hold_a_batch_only_while_the_admission_timeout_lasts() -> None:
    """Past the queue, descriptors wait as pending admissions for at most the admission
    timeout, then fail the batch: with 1 ms, a batch of 100,000 past a queue of 65,535 fails
    (Mooncake's own 1 s fails it too on a 2-core machine, where the queue drains ~25,000 a
    second: a race the test does not lean on); with pdctl's timeout it passes."""
    m = batch_script()
    most = {QUEUE.env: "65535", PENDING.env: "65535"}
    short, _ = m.run({**most, ADMISSION.env: "1"}, ("100000",))
    assert [r["ret"] for r in short] == [-1], short
    waited, log = m.run({**most, ADMISSION.env: "240000"}, ("100000", "1"))
    assert [r["ret"] for r in waited] == [0, 0], (waited, log[-2000:])


# The H100 run's pulls to one decode (tests/fixtures/gpu/vllm023-h100-g, prefill's log): the
# 31 requests of `pdctl bench`'s step (1,024 prompt tokens: 4,608 descriptors each, fragmented)
# in 8 batches written at once by the connector's sender threads, 142,848 descriptors.
H100_PULLS = (4608, 9216, 4608, 4608, 32256, 23040, 23040, 41472)


def test_pulls_written_at_once_share_the_queue_the_h100_s_overflowed_and_28_requests_fit() -> None:
    """What `pdctl bench` bounds a step's requests in flight by (capacity.kv_pull.carried): the
    batches of every pull to a decode share that peer's queue. The H100's eight batches,
    written at once with pdctl's environment: the one past the queue is refused at once, as
    its 41,472-descriptor batch was there (`failed (ret=-1) after 0.10 s`). The same batches
    with 28 requests in them (the last one 6 requests, not 9): every one passes. After a
    refusal the queue often stops draining (the module's docstring), and the batches still in
    it then fail only at the batch timeout: 5 s in the first run instead of pdctl's 240 (on the
    H100, before pdctl set it, at Mooncake's 30)."""
    m = batch_script()
    env = m.pdctl_env(EXAMPLE)
    assert sum(H100_PULLS) == 142_848 > CAPACITY
    over, log = m.run({**env, TRANSFER.env: "5"}, ("par:" + ",".join(map(str, H100_PULLS)),))
    assert len(over) == len(H100_PULLS) and any(r["ret"] != 0 for r in over), over
    assert "TCP lane queue-full rejection count" in log
    fit = (*H100_PULLS[:-1], 6 * 4608)
    assert sum(fit) == 28 * 4608 == 129_024 <= CAPACITY
    within, log = m.run(env, ("par:" + ",".join(map(str, fit)),))
    assert [r["ret"] for r in within] == [0] * len(fit), (within, log[-2000:])
    assert "queue-full" not in log


def test_the_queue_is_set_for_tcp_only_and_a_users_value_wins() -> None:
    m = batch_script()
    text = EXAMPLE.read_text()
    rdma = ROOT / "examples/phase2-mooncake-rdma.yaml"
    assert m.pdctl_env(rdma) == {}
    own = text.replace("\nengine:\n", f"\nengine:\n  env:\n    {QUEUE.env}: '8192'\n"
                       f"    {ADMISSION.env}: '5000'\n", 1)
    assert own != text
    envs = [dict(i.env) for i in plan_of(own).instances if i.role in ("prefill", "decode")]
    assert envs and all(e[QUEUE.env] == "8192" and e[ADMISSION.env] == "5000"
                        and e[PENDING.env] == "65535" for e in envs)


def setting_in(where: str, value: str, protocol: str = "tcp", setting: Setting = QUEUE) -> str:
    """examples/phase2-mooncake-tcp.yaml with `setting` set in `where`'s env."""
    text = EXAMPLE.read_text().replace("protocol: tcp", f"protocol: {protocol}", 1)
    env = f"{setting.env}: '{value}'"
    old, new = ((f"\n{where}:\n", f"\n{where}:\n  env:\n    {env}\n") if where == "engine"
                else (f"\n{where}: {{", f"\n{where}: {{env: {{{env}}}, "))
    assert old in text
    return text.replace(old, new, 1)


IGNORED = [(QUEUE, v) for v in ("65536", "0", "abc", " 4096", "4096x")] + [
    (PENDING, "65536"), (PENDING, "-1"), (ADMISSION, "600001"), (ADMISSION, "1e3")]


@pytest.mark.parametrize(("setting", "value"), IGNORED, ids=lambda x: getattr(x, "env", x))
def test_a_setting_mooncake_ignores_is_a_caution_where_it_is_set(setting: Setting,
                                                                 value: str) -> None:
    """Mooncake 0.3.13.post1 logs "Invalid ... value" for each of these and keeps its
    default (the next test runs the engine on some of them)."""
    (caution,) = plan_of(setting_in("engine", value, setting=setting)).cautions
    assert caution.path == f"engine.env.{setting.env}"
    assert caution.message.startswith(
        f"Mooncake ignores {value!r} (it takes digits from 1 to {setting.most}) and keeps its "
        f"default, {setting.default}{setting.unit}: ")
    assert caution.fix.startswith("remove it (pdctl sets " + (
        "the KV hold, in ms)" if setting is ADMISSION else "65535)"))
    (caution,) = plan_of(setting_in("decode", value, setting=setting)).cautions
    assert caution.path == f"decode.env.{setting.env}"


@pytest.mark.parametrize(("value", "taken"), [("abc", 5), ("3", 5), ("-30", 5), ("30s", 30),
                                              ("", 5)])
def test_a_batch_timeout_mooncake_reads_otherwise_is_a_caution(value: str, taken: int) -> None:
    """MC_TRANSFER_TIMEOUT is read with atoi, at least 5 s (transfer_engine_py.cpp)."""
    assert transfer_s(value) == taken
    (caution,) = plan_of(setting_in("prefill", value, setting=TRANSFER)).cautions
    assert caution.path == f"prefill.env.{TRANSFER.env}"
    assert caution.message.startswith(f"Mooncake reads {value!r} as {taken} s (atoi, at least 5)")
    assert caution.fix.startswith("remove it (pdctl sets the KV hold, in s)")
    assert plan_of(setting_in("engine", "600", setting=TRANSFER)).cautions == ()


def test_the_engine_ignores_what_the_caution_says_it_ignores() -> None:
    env = {QUEUE.env: " 4096", PENDING.env: "65536", ADMISSION.env: "600001"}
    results, log = batch_script().run(env, ("1",))
    assert [r["ret"] for r in results] == [0], results
    for s in SETTINGS:
        assert f"Invalid {s.env} value: {env[s.env]}, using default {s.default}" in log, s


@pytest.mark.parametrize(("setting", "value"), [(QUEUE, "1"), (QUEUE, "4096"), (QUEUE, "65535"),
                                                (PENDING, "1"), (ADMISSION, "600000")])
def test_a_setting_mooncake_takes_or_rdma_has_no_caution(setting: Setting, value: str) -> None:
    assert plan_of(setting_in("prefill", value, setting=setting)).cautions == ()
    rdma = plan_of(setting_in("engine", "65536", protocol="rdma", setting=setting)).cautions
    assert [c.path for c in rdma] == ["disaggregation.protocol"]  # the hosts list no HCAs


def test_validate_names_the_line_and_strict_refuses(tmp_path: Path) -> None:
    text = setting_in("engine", "65536")
    spec = written(tmp_path / "spec.yaml", text)
    line_no = text.splitlines().index(f"    {QUEUE.env}: '65536'") + 1
    _, err = cli(["validate", str(spec)])
    (warning,) = [w for w in err.splitlines() if "warning" in w]
    assert warning.startswith(f"{spec}:{line_no}: warning: engine.env.{QUEUE.env}: "
                              "Mooncake ignores '65536'")
    code, out, _ = run_cli(["validate", str(spec), "--strict"])
    assert code == 1 and out == ""
