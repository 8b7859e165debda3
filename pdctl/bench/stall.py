"""Why a bench step never ended, where /metrics can say: decode requests that waited for KV
from prefill while none arrived (top's kv-transfer-stalled verdict over the step's last
samples). With Mooncake on vLLM 0.23.0 a burst stalled this way and `vllm bench serve` waited
for every request until the step's timeout (tests/fixtures/gpu/vllm023-h100-e); the step's
error then says so instead of only that it timed out (pure)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pdctl.top.metrics import Snapshot
from pdctl.top.verdict import kv_stalled, limits
from pdctl.top.window import Window, figures

KEEP = 8  # samples per engine the note looks back over (~2 s apart while a step runs)


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
