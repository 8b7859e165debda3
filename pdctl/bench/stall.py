"""Why a bench step never ended, where /metrics can say: decode requests that waited for KV
from prefill while none arrived (top's kv-transfer-stalled verdict over the step's last
samples). With Mooncake on vLLM 0.23.0 a burst stalled this way and `vllm bench serve` waited
for every request until the step's timeout (tests/fixtures/gpu/vllm023-h100-e). A stall that
lasts STALL_STOP_S stops the step, and its error says why (pure; the caller does the I/O)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Any

from pdctl.top.metrics import Snapshot
from pdctl.top.verdict import kv_stalled, limits
from pdctl.top.window import Window, figures

KEEP = 8  # samples per engine the note looks back over (~2 s apart while a step runs)
# How long a stall must last before the step is stopped: twice the longest wait for a first
# KV transfer measured after a restart (a NIXL handshake on a loaded host, 62 s:
# docs/phase2-bare-metal.md), far below Mooncake's own 480 s and bench's 1,800 s step timeout.
STALL_STOP_S = 120.0


def keep(recent: dict[str, list[Snapshot]], scrape: dict[str, Snapshot]) -> None:
    """Add one scrape of every engine to `recent`, keeping the last KEEP of each."""
    for name, snap in scrape.items():
        row = recent.setdefault(name, [])
        row.append(snap)
        del row[:-KEEP]


def stall_note(recent: dict[str, list[Snapshot]], endpoints: Iterable[Any], name: str,
               phase: int, peers: dict[str, list[str]]) -> str:
    """'; <verdict line>' for each decode whose requests waited for KV through its recent
    samples with nothing received; '' where none did or too few samples were kept."""
    by_name = {e.name: e for e in endpoints}
    live = []
    for unit, snaps in recent.items():
        e = by_name.get(unit)
        good = [s for s in snaps if not s.error]
        if e is None or e.role != "decode" or len(good) < 2:
            continue
        live.append(figures(unit, e.role, e.where, good[0], good[-1]))
    if not live:
        return ""
    seconds = min(f.seconds for f in live)
    w = Window(name, phase, "hosts", seconds, tuple(live))
    return "".join(f"; {v.line}" for v in kv_stalled(w, live, limits(), peers))


class StallWatch:
    """Whether a step's stall has lasted STALL_STOP_S: fed one note per sample (`stall_note`'s,
    '' when nothing is stalled); any sample without a stall starts the count again."""

    def __init__(self, stop_s: float = STALL_STOP_S) -> None:
        self.stop_s = stop_s
        self.since: float | None = None
        self.stopped = False

    def see(self, note: str, now: float) -> bool:
        """True once, when the stall seen since `since` reaches stop_s."""
        if not note:
            self.since = None
            return False
        if self.since is None:
            self.since = now
        if self.stopped or now - self.since < self.stop_s:
            return False
        self.stopped = True
        return True


def stop_command(work_dir: str) -> str:
    """The shell that stops the step's `vllm bench serve` (the one whose --result-dir is the
    step's own folder). The pattern's `[-]` keeps it from matching the shell running it."""
    return f"pkill -f -- {shlex.quote('[-]-result-dir ' + work_dir)} || true"
