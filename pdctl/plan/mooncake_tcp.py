"""Mooncake's TCP transport and one KV pull: how many descriptors one batch to one peer may
hold, the environment pdctl sets so it holds the most, and the values Mooncake would ignore.

mooncake-transfer-engine 0.3.13.post1 (the version pdctl installs) admits work for one peer in
two stages (mooncake-transfer-engine/src/transport/tcp_transport/tcp_transport.cpp and
tcp_transport_lane_impl.h, enqueuePooledTransfer): a queue the four lanes drain
(MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER), then pending admissions that wait for room in it
(MC_TCP_MAX_PENDING_ADMISSIONS_PER_PEER), each for at most MC_TCP_ADMISSION_TIMEOUT_MS. A
descriptor past both is refused at once ("TCP lane queue-full rejection count"); one that waits
longer than the timeout fails. Either fails the whole batch_transfer_sync_write, which is how
prefill's MooncakeConnector writes the KV pull a decode step asks for. Measured with that wheel
on loopback (benchmarks/mooncake_tcp_batch.py): with the defaults (1024, 1024, 1000 ms) a
batch of more than about 2,048 descriptors is refused, and later batches to that peer usually
fail too, even one of one descriptor, until prefill or decode restarts (14 of 15 runs; in the
others the queue drained within 2 s: a race in the engine). With 65535 and 65535 and a
timeout the queue can drain within, batches of 131,000 pass and 140,000 are refused; with
65535 pending but the 1 s timeout, 100,000 fail (the pending ones time out). Upstream:
Mooncake#4209; Mooncake PR #3710 raised the defaults after 0.3.13.post1.

Each MC_TCP_ value is taken only as digits from 1 to its maximum; anything else is ignored for
the default, with "Invalid ... value" in the engine's log (parseBoundedTcpSetting). The batch
itself must be done within MC_TRANSFER_TIMEOUT (seconds, read with atoi, at least 5, 30 unset),
which pdctl sets to the KV hold too (TRANSFER below)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pdctl.plan.model import Caution
from pdctl.spec.model import Spec
from pdctl.spec.pd import Disaggregation


@dataclass(frozen=True)
class Setting:
    env: str
    default: int  # Mooncake's, and what it keeps for a value it ignores
    most: int  # the largest value it takes
    unit: str = ""


QUEUE = Setting("MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER", 1024, 65535)
PENDING = Setting("MC_TCP_MAX_PENDING_ADMISSIONS_PER_PEER", 1024, 65535)
ADMISSION = Setting("MC_TCP_ADMISSION_TIMEOUT_MS", 1000, 600_000, " ms")
SETTINGS = (QUEUE, PENDING, ADMISSION)
# The descriptors one batch to one peer can hold with pdctl's settings: the queue and the
# pending admissions, both at Mooncake's maximum.
CAPACITY = QUEUE.most + PENDING.most


def valid(setting: Setting, value: str) -> bool:
    """Whether Mooncake takes `value` (digits from 1 to the setting's maximum)."""
    return value.isascii() and value.isdigit() and 1 <= int(value) <= setting.most


# The Python binding vLLM's connector writes through (mooncake.engine.TransferEngine) fails a
# batch_transfer_sync_write that is not done after MC_TRANSFER_TIMEOUT seconds: read with atoi,
# at least 5, 30 when unset (mooncake-integration/transfer_engine/transfer_engine_py.cpp,
# TransferEnginePy()). A batch waiting behind the others in a peer's queue can take longer:
# on a 2-core machine busy with a test suite, 28 batches of 4,608 descriptors written at once
# (129,024, within the queue; benchmarks/mooncake_tcp_batch.py `par:`) took 40-60 s, and at
# Mooncake's 30 s 17 of the 28 failed; with 240 s none did.
TRANSFER = Setting("MC_TRANSFER_TIMEOUT", 30, 2**31 - 1, " s")
LEAST_TRANSFER_S = 5


def tcp_env(hold_s: int) -> list[tuple[str, str]]:
    """What pdctl gives a Mooncake engine over TCP: the largest queue and pending admissions,
    and an admission timeout and a batch timeout as long as the connector's own KV hold
    (`hold_s`), within Mooncake's maximum, so neither a descriptor waiting for the queue nor a
    batch waiting behind others gives up before the connector would."""
    return [(QUEUE.env, str(QUEUE.most)), (PENDING.env, str(PENDING.most)),
            (ADMISSION.env, str(min(ADMISSION.most, hold_s * 1000))),
            (TRANSFER.env, str(max(LEAST_TRANSFER_S, hold_s)))]


def transfer_s(value: str) -> int:
    """The batch timeout Mooncake takes from MC_TRANSFER_TIMEOUT=`value` (atoi, at least 5)."""
    lead = re.match(r"\s*([+-]?[0-9]+)", value)
    return max(LEAST_TRANSFER_S, int(lead[1]) if lead else 0)


def room(*user: Mapping[str, str]) -> int:
    """The descriptors one batch to a peer can hold under the user's `user` envs (the first
    that sets a variable wins; Mooncake's default for a value it ignores) over what pdctl sets
    (tcp_env: the most, CAPACITY in all)."""
    def value(s: Setting) -> int:
        found = next((e[s.env] for e in user if s.env in e), None)
        if found is None:
            return s.most
        return int(found) if valid(s, found) else s.default
    return value(QUEUE) + value(PENDING)


SET_BY_PDCTL = {QUEUE.env: str(QUEUE.most), PENDING.env: str(PENDING.most),
                ADMISSION.env: "the KV hold, in ms", TRANSFER.env: "the KV hold, in s"}
CONSEQUENCE = {
    QUEUE.env: "the queue then holds 1,024 descriptors",
    PENDING.env: "only 1,024 more wait for room in the queue",
    ADMISSION.env: "a descriptor waiting for room in the queue gives up after 1 s",
}


def cautions(dis: Disaggregation | None, spec: Spec) -> tuple[Caution, ...]:
    """A user's value of one of these that Mooncake ignores, located at the engine's or a
    role's env that sets it."""
    if dis is None or dis.connector != "mooncake" or dis.protocol != "tcp":
        return ()
    envs = [("engine.env", spec.engine.env)] + [
        (f"{name}.env", role.env) for name, role in (("prefill", spec.prefill),
                                                     ("decode", spec.decode)) if role]
    out = []
    for path, env in envs:
        for s in SETTINGS:
            value = env.get(s.env)
            if value is None or valid(s, value):
                continue
            out.append(Caution(
                f"{path}.{s.env}",
                f"Mooncake ignores {value!r} (it takes digits from 1 to {s.most}) and keeps "
                f"its default, {s.default}{s.unit}: {CONSEQUENCE[s.env]}, and a decode step's "
                "KV pull that does not fit is refused, and often every pull to that decode "
                "after it",
                f"remove it (pdctl sets {SET_BY_PDCTL[s.env]}) or give a number from 1 to "
                f"{s.most}",
            ))
        value = env.get(TRANSFER.env)
        if value is not None and not (value.isascii() and value.isdigit()
                                      and int(value) >= LEAST_TRANSFER_S):
            out.append(Caution(
                f"{path}.{TRANSFER.env}",
                f"Mooncake reads {value!r} as {transfer_s(value)} s (atoi, at least "
                f"{LEAST_TRANSFER_S}): a KV pull's batch not done by then fails, even one "
                "waiting its turn behind other pulls to that decode",
                f"remove it (pdctl sets {SET_BY_PDCTL[TRANSFER.env]}) or give whole seconds, "
                f"at least {LEAST_TRANSFER_S}",
            ))
    return tuple(out)
