"""Prometheus text of a vLLM engine or router -> a Snapshot of samples (pure).

Parsed with prometheus_client's text parser. The metric names are vLLM's (v1 engine,
`vllm/v1/metrics/loggers.py` of 0.32.0 and 0.33.0, which agree on every name used here:
tests/top/data lists both); where an older name exists it is listed after the current one."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]

# figure -> sample names, first match wins (current name first)
NAMES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running",), "waiting": ("vllm:num_requests_waiting",),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "requests": ("vllm:request_success_total",), "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "prompt_by_source": ("vllm:prompt_tokens_by_source_total",),
    "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "preemptions": ("vllm:num_preemptions_total",), "ttft": ("vllm:time_to_first_token_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
}
# requests waiting, by reason (vLLM 0.23.0 and later, `vllm/v1/metrics/loggers.py`): `deferred`
# counts those waiting for KV from a remote prefill (WAITING_FOR_REMOTE_KVS), `capacity` those
# waiting for room in the batch or the KV cache
DEFERRED = "vllm:num_requests_waiting_by_reason"
# the KV connectors' own error counters (0.33.0 `vllm/distributed/kv_transfer/kv_connector/v1/`
# nixl and mooncake; the CPU build 0.32.0 has the NIXL ones); any other `vllm:*failed*_total`
# counter is reported too. Each one that grows is a failure of a bench step, the canary and a
# `top` verdict (top/kv_events.py), prefill's as much as decode's: NIXL counts an expired KV
# lease on prefill. `nixl_num_notifications_after_expiry`: decode read blocks prefill had
# already released (0.33.0 `nixl/stats.py` l.276; the counter of the "Potentially invalid KV
# blocks" log line).
CONNECTOR_ERRORS = (
    "vllm:nixl_num_failed_transfers_total", "vllm:nixl_num_failed_notifications_total",
    "vllm:nixl_num_kv_expired_reqs_total", "vllm:nixl_num_notifications_after_expiry_total",
    "vllm:mooncake_num_failed_transfers_total", "vllm:mooncake_num_failed_recvs_total",
    "vllm:mooncake_num_kv_expired_reqs_total",
)


@dataclass(frozen=True)
class Snapshot:
    """Every sample of one /metrics answer, read at `at` (seconds, caller's clock)."""

    at: float
    samples: tuple[tuple[str, Labels, float], ...] = field(default=())
    error: str | None = None

    def names(self) -> set[str]:
        return {name for name, _, _ in self.samples}

    def pick(self, figure: str) -> str | None:
        """The first of NAMES[figure] this snapshot has."""
        have = self.names()
        for name in NAMES[figure]:
            if name in have or name + "_bucket" in have:
                return name
        return None

    def total(self, name: str, **match: str) -> float | None:
        """Sum of the samples called `name` whose labels include `match`; None if none."""
        found = [v for n, labels, v in self.samples if n == name and _has(labels, match)]
        return sum(found) if found else None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for n, labels, v in self.samples:
            if n == name:
                key = dict(labels).get(label, "")
                out[key] = out.get(key, 0.0) + v
        return out

    def buckets(self, name: str) -> list[tuple[float, float]]:
        """Cumulative (upper bound, count) of histogram `name`, summed over label sets."""
        acc: dict[float, float] = {}
        for n, labels, v in self.samples:
            if n == name + "_bucket":
                le = float(dict(labels).get("le", "inf"))
                acc[le] = acc.get(le, 0.0) + v
        return sorted(acc.items())


def _has(labels: Labels, match: dict[str, str]) -> bool:
    d = dict(labels)
    return all(d.get(k) == v for k, v in match.items())


def delta(first: Snapshot, last: Snapshot, name: str | None) -> float | None:
    """A counter's growth between two scrapes; None where `last` lacks it, its value at `last`
    where it went back (the engine or router restarted)."""
    if name is None or (b := last.total(name)) is None:
        return None
    a = first.total(name) or 0.0
    return b - a if b >= a else b


def parse(text: str, at: float) -> Snapshot:
    """A Snapshot of Prometheus text; unparsable text gives a Snapshot with `error`."""
    out: list[tuple[str, Labels, float]] = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.append((s.name, tuple(sorted(s.labels.items())), float(s.value)))
    except (ValueError, TypeError, IndexError) as exc:
        return Snapshot(at, (), f"unreadable metrics ({exc})")
    return Snapshot(at, tuple(out))


def quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile over cumulative buckets (linear in a bucket)."""
    rows = list(buckets)
    if not rows or rows[-1][1] <= 0:
        return None
    rank = q * rows[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in rows:
        if count >= rank:
            if upper == float("inf"):
                return lower
            if count == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return lower
