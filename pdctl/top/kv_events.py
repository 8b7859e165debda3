"""Suspect KV-transfer events in the engines' logs and error counters (pure).

A P/D request can come back 200 with tokens computed from KV blocks the prefill engine had
already freed: vLLM then only logs it. `pdctl bench`, `pdctl top` and the P/D canary
(`up --verify`, `status --verify`) count every line below as a failure, never as a success,
and name the prefill -> decode pair it concerns (from vllm-router's request id, which the
engine logs: `cmpl-___prefill_addr_<P>___decode_addr_<D>_<uuid>-0-<hash>`, vllm-router
`src/routers/http/vllm_pd_router.rs`; vLLM takes X-Request-Id as the request id,
`vllm/entrypoints/openai/engine/serving.py` `_base_request_id` in 0.23.0).

The messages are vLLM's own, in 0.23.0 and 0.33.0 (the files of each release's wheel):
- NIXL, prefill side, a KV lease ran out before decode said it had read the blocks:
  "Releasing expired KV blocks for request %s which were retrieved by %d remote worker(s)
  before lease expired." (0.23.0 `kv_connector/v1/nixl/worker.py` l.1780-1782, 0.33.0
  `nixl/base_worker.py` l.3370-3372)
- NIXL, prefill side, decode read blocks of a request prefill no longer knew (already freed
  and possibly reused: the answer may be wrong): "Potentially invalid KV blocks for
  unrecognized request %s were retrieved by a decode worker. They may have expired." (ERROR;
  0.23.0 `nixl/worker.py` l.1817-1821, 0.33.0 `nixl/pull_worker.py` l.675-679)
- NIXL, either side: "NIXL transfer failure: %s | Context: %s" (ERROR; 0.23.0
  `nixl/worker.py` l.690-691, 0.33.0 `nixl/base_worker.py` l.1377-1378; failure types
  handshake_failed, transfer_failed, notification_failed, ...)
- Mooncake (`kv_connector/v1/mooncake/mooncake_connector.py`): "Request %s expired before
  sending on P side." (0.23.0 l.1106-1107, 0.33.0 l.1713-1714), "Request %s timed out after
  %d seconds without being sent. Freeing its blocks on the producer side." (0.23.0
  l.1479-1481, 0.33.0 l.2340-2342), "Sending to %s failed (ret=%s) ..." (0.23.0 l.1378-1379,
  0.33.0 l.2051-2052), "pulling kv_caches for %s failed: %s" (0.23.0 l.1609-1610, 0.33.0
  l.2534), "Timeout waiting for P side ready: %s" (0.23.0 l.1076-1077, 0.33.0 l.1680-1681),
  and in 0.23.0 "Error happens during transferring kvcache for %s: %s" (l.1574-1575),
  "MooncakeXferMetadata transfer failed for %s: %s" (l.1587), and prefill's sender failing:
  "Error in Mooncake sender thread: %s. Exiting thread." (l.973: no KV is sent after it),
  "Error processing Mooncake xfer request: %s" (l.989), "Error in _sender_worker: %s" (l.1001).
- Mooncake's transfer engine itself (its glog lines on the engine's stderr; the strings of
  mooncake-transfer-engine-cuda13 0.3.13.post1's `mooncake/engine.so`): "TCP lane queue-full
  rejection count: N" (a transfer's slices refused by a peer's lane queue; with vLLM's
  MooncakeConnector the batch then fails, Mooncake#4209), "Failed to admit TCP work for ...",
  "TcpTransport::getConnection failed to create connection to ...", "Sync batch data transfer
  timeout after ...". They name no request: the pair comes from who logged them.
Upstream links: https://github.com/vllm-project/vllm/blob/v0.23.0/vllm/distributed/kv_transfer/
kv_connector/v1/nixl/worker.py and .../v0.33.0/.../nixl/pull_worker.py (docs/bench.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# (kind, what it means, pattern): the pattern captures the request id where the line has one
PATTERNS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    (
        "invalid-kv", "decode read KV blocks prefill had already released: the answer may be wrong",
        re.compile(r"Potentially invalid KV blocks for unrecognized request (?P<req>\S+) were "
                   r"retrieved by a decode worker"),
    ),
    (
        "lease-expired", "the KV lease expired before decode read the blocks: prefill freed them",
        re.compile(r"Releasing expired KV blocks for request (?P<req>\S+) which were retrieved "
                   r"by (?P<n>\d+) remote worker\(s\) before lease expired"),
    ),
    (
        "transfer-failed", "a NIXL KV transfer failed",
        re.compile(r"NIXL transfer failure: (?P<what>[\w.-]+)"),
    ),
    (
        "lease-expired", "Mooncake: the request's KV expired on prefill before it was sent",
        re.compile(r"Request (?P<req>\S+) expired before sending on P side"),
    ),
    (
        "lease-expired", "Mooncake: prefill freed the KV blocks unsent after its timeout",
        re.compile(r"Request (?P<req>\S+) timed out after \d+ seconds without being sent"),
    ),
    (
        "transfer-failed", "a Mooncake KV transfer failed",
        re.compile(r"Sending to \S+ failed \(ret=|pulling kv_caches for (?P<req>.+?) failed|"
                   r"Error happens during transferring kvcache for|MooncakeXferMetadata "
                   r"transfer failed for|Timeout waiting for P side ready|Error in Mooncake "
                   r"sender thread|Error processing Mooncake xfer request|Error in _sender_worker"),
    ),
    (
        "transfer-failed", "Mooncake's TCP queue to that decode was full: the KV pull was "
        "refused, and often the pulls after it (its MC_TCP_ settings, or a pull larger than "
        "they hold: docs/troubleshooting.md)",
        re.compile(r"TCP lane queue-full rejection count: \d+|Failed to admit TCP work for"),
    ),
    (
        "transfer-failed", "Mooncake's transfer engine dropped a KV transfer",
        re.compile(r"TcpTransport::getConnection failed to create connection to|"
                   r"Sync batch data transfer timeout after"),
    ),
)
# vllm-router's P/D request id (as bench.canary.PAIR): the pair it chose, as host:port
PAIR = re.compile(r"___prefill_addr_(?P<prefill>.+?)___decode_addr_(?P<decode>.+?)_")
LINE_MAX = 400


@dataclass(frozen=True)
class KvEvent:
    """One suspect line: who logged it, what kind, the prefill -> decode pair, the line."""

    instance: str
    kind: str  # invalid-kv | lease-expired | transfer-failed | counter
    meaning: str
    pair: str  # "pd-prefill-0 -> pd-decode-0" ("?" for a side the line does not name)
    line: str


def new_lines(before: str, after: str) -> str:
    """What a log gained between two reads of its last lines (`before`, then `after`): the
    lines of `after` past the last place where `before`'s final lines appear. Where they do
    not appear (more new lines than one read holds, or the log was rotated), all of `after`."""
    old = before.splitlines()
    new = after.splitlines()
    if not old:
        return after
    for k in (3, 2, 1):
        anchor = old[-k:]
        if len(anchor) < k:
            continue
        for end in range(len(new), k - 1, -1):
            if new[end - k:end] == anchor:
                rest = new[end:]
                return "\n".join(rest) + ("\n" if rest else "")
    return after


def _name(addr: str, names: dict[str, str]) -> str:
    return names.get(addr) or names.get(addr.split("://", 1)[-1]) or addr


def pair_of(text: str, instance: str, role: str, names: dict[str, str],
            peers: dict[str, list[str]]) -> str:
    """The pair a line concerns: from the router's request id in it, else the engine that
    logged it and the only engine of the other role ("?" where there are several)."""
    m = PAIR.search(text)
    if m:
        return f"{_name(m.group('prefill'), names)} -> {_name(m.group('decode'), names)}"
    pre = peers.get("prefill", [])
    dec = peers.get("decode", [])
    if role == "prefill":
        return f"{instance} -> {dec[0] if len(dec) == 1 else '?'}"
    if role == "decode":
        return f"{pre[0] if len(pre) == 1 else '?'} -> {instance}"
    return "? -> ?"


def scan(instance: str, role: str, text: str, names: dict[str, str],
         peers: dict[str, list[str]]) -> list[KvEvent]:
    """The suspect lines of one engine's log text. `names`: engine address (host:port or
    URL) -> instance name; `peers`: role -> instance names."""
    out = []
    for raw in text.splitlines():
        for kind, meaning, pattern in PATTERNS:
            if pattern.search(raw):
                line = raw.strip()
                if len(line) > LINE_MAX:
                    line = line[:LINE_MAX] + "..."
                out.append(KvEvent(instance, kind, meaning,
                                   pair_of(raw, instance, role, names, peers), line))
                break
    return out


def counter_events(figures: Any, peers: dict[str, list[str]]) -> list[KvEvent]:
    """A connector error counter that grew over a window (top.window.Figures of one engine,
    prefill or decode: NIXL counts expired leases on prefill) as events."""
    out = []
    for metric, grew in sorted((figures.connector_errors or {}).items()):
        if grew and grew > 0:
            name = metric.removeprefix("vllm:")
            out.append(KvEvent(
                figures.name, "counter", "a KV connector error counter grew",
                pair_of("", figures.name, figures.role, {}, peers), f"{name} +{grew:g}",
            ))
    return out


def summary(events: list[KvEvent], shown: int = 2) -> list[str]:
    """One line per (pair, kind): how many, what it means, who logged it, and the first
    `shown` log lines."""
    groups: dict[tuple[str, str, str], list[KvEvent]] = {}
    for e in events:
        groups.setdefault((e.pair, e.kind, e.meaning), []).append(e)
    out = []
    for (pair, kind, meaning), items in groups.items():
        who = ", ".join(sorted({e.instance for e in items}))
        n = len(items)
        head = f"{pair}: {n} {kind} event{'' if n == 1 else 's'} ({meaning}; logged by {who})"
        lines = [e.line for e in items[:shown]]
        out.append(head + (": " + " | ".join(lines) if lines else ""))
    return out


def as_dicts(events: list[KvEvent]) -> list[dict[str, str]]:
    return [{"instance": e.instance, "kind": e.kind, "meaning": e.meaning, "pair": e.pair,
             "line": e.line} for e in events]


def peers_of(plan: Any) -> dict[str, list[str]]:
    """role -> the plan's instance names of that role (prefill and decode)."""
    out: dict[str, list[str]] = {}
    for i in plan.instances:
        if i.role in ("prefill", "decode"):
            out.setdefault(i.role, []).append(i.name)
    return out
