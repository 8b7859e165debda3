"""The P/D canary (pure): the same prompts, greedy and seeded, through the disaggregated path
(the router) and through one engine alone (a prefill engine addressed directly: a request
without `kv_transfer_params` runs there as on a plain engine, NixlConnector's and
MooncakeConnector's `request_finished` leave it alone). The first N tokens must agree, and
the decode engines must have received prompt KV over the connector with no connector error
and no suspect KV event in any engine's log (top/kv_events.py: an expired KV lease, blocks
read after prefill released them): a P/D deployment that recomputes every prompt on decode,
loses KV or may answer from freed blocks is not what was asked for (vllm#52617:
disaggregated output diverging at the first token).

`verdict_line(v)` is the one line every command prints (`up --verify`, `status --verify`,
`top --canary`, `bench`): passed, or failed naming the prefill -> decode pair(s)."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from pdctl.top.kv_events import KvEvent, as_dicts, summary

WORDS = (
    "river stone light cloud number garden paper engine window silver market yellow "
    "morning table answer orange planet letter winter music bridge simple forest wooden"
).split()
# vllm-router's P/D request ids carry the pair it chose (its `src/routers/pd_router.rs`)
PAIR = re.compile(r"___prefill_addr_(?P<prefill>.+?)___decode_addr_(?P<decode>.+?)_")


def prompts(n: int, seed: int, run: str = "", words: int = 48) -> list[str]:
    """`n` prompts of `words` words from `seed`, each opened by `run` (new for every canary:
    a prompt decode has cached from an earlier canary would need no KV transfer)."""
    rng = random.Random(seed)
    head = f"{run} " if run else ""
    return [head + " ".join(rng.choice(WORDS) for _ in range(words)) for _ in range(n)]


def payload(model: str, prompt: str, tokens: int, seed: int, token_ids: bool = False
            ) -> dict[str, Any]:
    """A completion every engine must answer alike: greedy, seeded, exactly `tokens` tokens.
    With `token_ids`, the token ids come back too (`logprobs` with vLLM's
    `return_tokens_as_token_ids`); without, the texts are compared."""
    body: dict[str, Any] = {
        "model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "seed": seed,
        "ignore_eos": True,
    }
    if token_ids:
        body.update(logprobs=1, return_tokens_as_token_ids=True)
    return body


@dataclass(frozen=True)
class Answer:
    """One completion: its tokens (ids where returned, else its text), or why none came."""

    tokens: tuple[str, ...] = ()
    text: str = ""
    pair: tuple[str, str] | None = None  # (prefill URL, decode URL) the router chose
    error: str | None = None


def answer_of(status: int, doc: Any) -> Answer:
    if status != 200 or not isinstance(doc, dict) or not doc.get("choices"):
        detail = doc.get("error", doc) if isinstance(doc, dict) else doc
        return Answer(error=f"answered {status}: {str(detail)[:200]}")
    choice = doc["choices"][0]
    lp = choice.get("logprobs") or {}
    tokens = tuple(str(t) for t in lp.get("tokens") or ())
    m = PAIR.search(str(doc.get("id", "")))
    pair = (m.group("prefill"), m.group("decode")) if m else None
    return Answer(tokens, str(choice.get("text", "")), pair)


@dataclass(frozen=True)
class Pair:
    prompt: int
    via: str  # what answered through the P/D path (the pair, or the router)
    alone: str  # the engine that answered alone
    agree: int  # leading tokens that agree
    expected: int
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.agree >= self.expected and not self.detail


@dataclass(frozen=True)
class Verdict:
    ok: bool
    pairs: tuple[Pair, ...]
    kv_tokens_received: float | None
    connector_errors: dict[str, float] = field(default_factory=dict)
    lines: tuple[str, ...] = ()
    events: tuple[KvEvent, ...] = ()  # suspect KV events logged or counted meanwhile
    tokens: int = 0  # leading tokens compared

    @property
    def failed_pairs(self) -> list[str]:
        """The prefill -> decode pairs of the failing prompts and of the suspect events."""
        out = [p.via for p in self.pairs if not p.ok]
        out += [e.pair for e in self.events]
        return list(dict.fromkeys(out))


def passed_line(v: Verdict) -> str:
    """What a passing canary showed: `2 greedy prompts agree on 8 tokens through P -> D and
    P alone; 96 prompt tokens came over the KV connector`."""
    via = sorted({p.via for p in v.pairs})
    kv = "-" if v.kv_tokens_received is None else f"{v.kv_tokens_received:g}"
    alone = v.pairs[0].alone if v.pairs else "?"
    return (f"{len(v.pairs)} greedy prompts agree on {v.tokens or '?'} tokens through "
            f"{', '.join(via)} and {alone} alone; {kv} prompt tokens came over the KV connector")


def failed_who(v: Verdict) -> str:
    """The prefill -> decode pair(s) a failed canary names."""
    return ", ".join(v.failed_pairs) or "the P/D path"


def verdict_line(v: Verdict) -> str:
    """`P/D canary passed: ...` or `P/D canary failed for P -> D: <why>` (first 3 reasons)."""
    if v.ok:
        return "P/D canary passed: " + passed_line(v)
    return f"P/D canary failed for {failed_who(v)}: " + "; ".join(v.lines[:3])


def agree(a: Answer, b: Answer) -> int:
    """Leading tokens the two answers share (token ids; characters of the text where one has
    none)."""
    x, y = (a.tokens, b.tokens) if a.tokens and b.tokens else (a.text, b.text)
    diff = (i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q)
    return next(diff, min(len(x), len(y)))


def judge(
    via: list[Answer], alone: list[Answer], tokens: int, names: dict[str, str], alone_name: str,
    kv_received: float | None, connector_errors: dict[str, float], engines: str = "router",
    events: list[KvEvent] | tuple[KvEvent, ...] = (),
) -> Verdict:
    """The canary's verdict: every prompt agrees on its first `tokens` tokens, KV came over
    the connector (decode's prompt_tokens_by_source{source=external_kv_transfer} grew), no
    connector error counter grew and no engine logged a suspect KV event (`events`, from
    top/kv_events.py, counters included). `names`: engine URL -> instance name; `engines`:
    what the P/D path is called where the router's answer does not say which pair served it."""
    pairs = []
    for i, (a, b) in enumerate(zip(via, alone, strict=True)):
        who = engines
        if a.pair:
            who = f"{names.get(a.pair[0], a.pair[0])} -> {names.get(a.pair[1], a.pair[1])}"
        detail = ""
        if a.error or b.error:
            detail = f"P/D path {a.error}" if a.error else f"{alone_name} {b.error}"
            n, expected = 0, tokens
        else:
            n = agree(a, b)
            expected = tokens if a.tokens and b.tokens else len(b.text)
            if n < expected:
                at = n if a.tokens else None
                shown = (a.tokens[n:n + 3], b.tokens[n:n + 3]) if a.tokens else (a.text, b.text)
                detail = (f"differs at token {at}: {shown[0]} vs {shown[1]}" if at is not None
                          else f"text differs: {shown[0]!r} vs {shown[1]!r}")
        pairs.append(Pair(i, who, alone_name, n, expected, detail))
    lines = [f"prompt {p.prompt} via {p.via} vs {p.alone}: {p.detail}" for p in pairs if not p.ok]
    grew = {k: v for k, v in connector_errors.items() if v > 0}
    if grew and not events:  # events carry the counters per engine, with the pair
        lines.append("KV connector errors: " + ", ".join(f"{k} +{v:g}" for k, v in grew.items()))
    lines += ["suspect KV: " + line for line in summary(list(events))]
    if not kv_received:
        lines.append(
            "decode received no prompt KV over the connector "
            "(prompt_tokens_by_source{source=external_kv_transfer} did not grow): the P/D "
            "path recomputed or lost the prefill"
        )
    ok = bool(pairs) and not lines
    return Verdict(ok, tuple(pairs), kv_received, dict(connector_errors), tuple(lines),
                   tuple(events), tokens)


def as_dict(v: Verdict) -> dict[str, Any]:
    return {
        "ok": v.ok, "kvTokensReceived": v.kv_tokens_received, "connectorErrors": v.connector_errors,
        "pairs": [
            {"prompt": p.prompt, "via": p.via, "alone": p.alone, "agree": p.agree,
             "expected": p.expected, "ok": p.ok, "detail": p.detail}
            for p in v.pairs
        ],
        "failures": list(v.lines), "failedPairs": v.failed_pairs,
        "kvEvents": as_dicts(list(v.events)), "verdict": verdict_line(v),
    }
