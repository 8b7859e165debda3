"""A load on one engine, step by step: what `pdctl plan --load` predicts and `pdctl bench`
compares with (pure, deterministic).

The scheduler is vLLM's V1 scheduler as 0.23.0 runs it (vllm/v1/core/sched/scheduler.py,
`schedule()`): each step first gives every running request its next tokens (one for a decoding
sequence, the rest of its prompt for a partly prefilled one, within the step's token budget
`--max-num-batched-tokens`), then admits waiting requests in arrival order while the budget
lasts and fewer than `--max-num-seqs` run, a prompt longer than what is left of the budget
being prefilled in chunks over several steps (chunked prefill). A request emits its first token
at the end of the step that computes the last of its prompt, then one token a step. With
asynchronous scheduling (0.23's default: vllm/v1/engine/core.py, `step_with_batch_queue`) the
scheduler plans the next step as soon as it launches one, so a busy engine admits a request
only into the step planned after it arrived: one that comes during step N joins step N+2, N+1
having been planned when N started; an idle engine takes it at once (at 4 req/s of Qwen3-8B
on an H100 the engine's own metrics put 11 ms between arrival and scheduling, with 8.7 ms
steps). Each step
takes pdctl.capacity.steptime's time for what it ran. The KV cache bounds admission: a request
is admitted only while the running requests' whole lengths fit the engine's KV tokens (vLLM
would preempt later; a plan that needs preemption is past its capacity anyway).

Loads are those `vllm bench serve` sends: a closed loop of N clients (`--max-concurrency`),
each sending its next request when its last one ends, or Poisson arrivals at a rate
(`--request-rate`), or all at once. A request may find part of its prompt in the prefix cache
(`cached_tokens`): only the rest is prefilled, against the cached part as context. The measures
are `vllm bench serve`'s: TTFT, TPOT = (last token - first) / (output - 1), ITL (every gap
between two tokens), E2E, and throughput over the whole run.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Any

from pdctl.capacity.steptime import Engine

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Load:
    """A bench-like load: a closed loop of `concurrency` clients or Poisson arrivals at `rate`
    requests/s, `requests` in all (sending stops after `submit_s` if given)."""

    prompt_tokens: int
    output_tokens: int
    requests: int
    concurrency: int | None = None
    rate: float | None = None
    submit_s: float | None = None
    seed: int = 0
    cached_tokens: int = 0  # prompt tokens each request finds in the prefix cache
    # the arrival times (s) a recording sent its requests at, replayed instead of a Poisson draw
    arrivals: tuple[float, ...] | None = None
    # streamed responses (`"stream": true`, as `vllm bench serve` sends): the API server writes
    # every token as it comes; without, it answers once at the end and streams nothing
    stream: bool = True

    @property
    def label(self) -> str:
        if self.concurrency is not None:
            return f"concurrency {self.concurrency}"
        return f"rate {self.rate:g}/s" if self.rate is not None else "all at once"


@dataclass
class _Req:
    id: int
    arrival: float
    prompt: int
    done_prompt: int = 0
    first: float | None = None
    end: float | None = None


@dataclass
class Result:
    """Per-request times of one simulated load and the engine's steps."""

    load: Load
    ttft_s: list[float] = field(default_factory=list)
    tpot_s: list[float] = field(default_factory=list)
    e2e_s: list[float] = field(default_factory=list)
    steps: list[tuple[float, int]] = field(default_factory=list)  # (duration, decodes)
    # (gap since the last tokens reached their clients, sequences whose token it was): ITL
    gaps: list[tuple[float, int]] = field(default_factory=list)
    wall_s: float = 0.0
    output_tokens: int = 0
    max_running: int = 0

    def summary(self) -> dict[str, Any]:
        """The figures, in ms and per second (bench's names)."""
        done = len(self.e2e_s)
        return {
            "requests": done,
            "ttftMs": _pcts(self.ttft_s),
            "tpotMs": _pcts(self.tpot_s),
            "itlMs": _weighted(self.gaps),
            "e2elMs": _pcts(self.e2e_s),
            "requestThroughput": sig(done / self.wall_s) if self.wall_s else None,
            "outputThroughput": sig(self.output_tokens / self.wall_s) if self.wall_s else None,
            "totalTokenThroughput": sig(
                (self.output_tokens + done * self.load.prompt_tokens) / self.wall_s
            )
            if self.wall_s
            else None,
            "maxRunning": self.max_running,
        }


def sig(x: float) -> float:
    """`x` to 4 significant digits (ratios and predictions span many orders of magnitude)."""
    return float(f"{x:.4g}")


def _pct(sorted_xs: list[float], p: float) -> float:
    k = (len(sorted_xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (k - lo)


def _pcts(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    s = sorted(xs)
    out: dict[str, float | None] = {"mean": sig(sum(s) / len(s) * 1000)}
    out.update({f"p{p}": sig(_pct(s, p) * 1000) for p in PERCENTILES})
    return out


def _weighted(steps: list[tuple[float, int]]) -> dict[str, float | None]:
    """Percentiles of the gaps between tokens: each gap between two deliveries of a step's
    tokens, once per sequence that got a token in both."""
    pairs = sorted((d, n) for d, n in steps if n > 0)
    total = sum(n for _, n in pairs)
    if not total:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    out: dict[str, float | None] = {"mean": sig(sum(d * n for d, n in pairs) / total * 1000)}
    for p in PERCENTILES:
        want, seen = total * p / 100, 0
        for d, n in pairs:
            seen += n
            if seen >= want:
                out[f"p{p}"] = sig(d * 1000)
                break
    return out


def simulate(
    engine: Engine,
    load: Load,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    kv_tokens: int | None = None,
    prefilled: bool = False,
) -> Result:
    """Run `load` on `engine`. `prefilled`: requests arrive with their KV already there (a P/D
    decode instance): no prefill steps; the first token still waits for the API server's
    intake, a step and its streaming."""
    if max_num_batched_tokens < 1 or max_num_seqs < 1:
        raise ValueError("max_num_batched_tokens and max_num_seqs must be at least 1")
    cal = engine.cal
    out = load.output_tokens
    res = Result(load)
    rng = random.Random(load.seed)
    arrivals: list[float] = []  # Poisson or all-at-once arrival times, in order
    if load.concurrency is None and load.arrivals is not None:
        arrivals = sorted(load.arrivals)[: load.requests]
    elif load.concurrency is None:
        t = 0.0
        for _ in range(load.requests):
            arrivals.append(t)
            if load.rate:
                t += rng.expovariate(load.rate)
    sent = 0
    waiting: list[_Req] = []  # taken in by the API server, in order
    pending: list[tuple[float, int, _Req]] = []  # (ready time, id, request) not yet taken in
    sending: list[tuple[float, int, _Req]] = []  # (sent time, id, request) not yet looked at

    # The API server is one event loop: it takes requests in (tokenizes them) and streams each
    # step's tokens back, one piece of work after another in the order they reach it.
    front_free = 0.0  # when it is done with the work that reached it so far
    front_s = cal.request_s + cal.prompt_token_s * load.prompt_tokens

    def send(at: float) -> None:
        nonlocal sent
        if sent >= load.requests:
            return
        if load.submit_s is not None and sent >= (load.concurrency or 0) and at > load.submit_s:
            return
        cached = min(load.cached_tokens, load.prompt_tokens - 1)
        r = _Req(sent, at, load.prompt_tokens,
                 done_prompt=load.prompt_tokens if prefilled else max(0, cached))
        sent += 1
        heapq.heappush(sending, (at, r.id, r))

    def take_in(t: float) -> None:  # the API server takes in every request sent by `t`
        nonlocal front_free
        while sending and sending[0][0] <= t:
            at, rid, r = heapq.heappop(sending)
            front_free = max(front_free, at) + front_s
            heapq.heappush(pending, (front_free, rid, r))

    if load.concurrency is not None:
        for _ in range(min(load.concurrency, load.requests)):
            send(0.0)
    else:
        for a in arrivals:
            send(a)
    now = 0.0
    step = 0
    prefilling: list[_Req] = []  # admitted, prompt not yet all computed
    decoding: dict[int, _Req] = {}
    finish: list[tuple[int, int]] = []  # (step at whose end it emits its last token, id)
    ctx_sum = 0.0  # context of the decoding sequences, all together
    held = 0  # KV tokens the admitted requests will hold at their end
    cap = kv_tokens if kv_tokens else None
    budget = 0  # tokens left in this step (set each step)

    def prefill(r: _Req) -> None:  # the next chunk of r's prompt, within the step's budget
        nonlocal budget
        n = min(r.prompt - r.done_prompt, budget)
        chunks.append((n, r.done_prompt))
        r.done_prompt += n
        budget -= n
        if r.done_prompt >= r.prompt:
            finished_prefill.append(r)

    def end(r: _Req, at: float) -> None:
        nonlocal held
        r.end = at
        held -= r.prompt + out
        _done(res, r, out)
        if load.concurrency is not None:
            send(at)

    lag = engine.shape.async_scheduling
    last_seen = 0.0  # when the last step's tokens reached their clients
    planned = 0.0  # when the step about to run was planned: the last step's start, if busy
    while sending or pending or waiting or prefilling or decoding:
        take_in(now)
        while pending and pending[0][0] <= (planned if lag else now):
            waiting.append(heapq.heappop(pending)[2])
        if not (waiting or prefilling or decoding):
            if not pending:
                take_in(sending[0][0])
            # idle: the scheduler wakes for the next request that reaches it
            now = max(now, pending[0][0])
            planned = now
            continue
        budget = max_num_batched_tokens - len(decoding)
        chunks: list[tuple[int, int]] = []
        finished_prefill: list[_Req] = []
        for r in prefilling:
            if budget <= 0:
                break
            prefill(r)
        running = len(decoding) + len(prefilling)
        while waiting and running < max_num_seqs and (budget > 0 or prefilled):
            r = waiting[0]
            if cap is not None and held + r.prompt + out > cap and running:
                break
            waiting.pop(0)
            held += r.prompt + out
            running += 1
            if prefilled:
                finished_prefill.append(r)
                continue
            prefill(r)
            prefilling.append(r)
        res.max_running = max(res.max_running, running)
        if not chunks and not decoding and not finished_prefill:
            if not pending and sending:
                take_in(sending[0][0])
            now = max(now, pending[0][0]) if pending else now  # nothing fits: wait for arrivals
            planned = now
            continue
        dt = engine.step_s(len(decoding), ctx_sum, tuple(chunks)) if (chunks or decoding) else 0.0
        planned = now
        now += dt
        if dt:
            res.steps.append((dt, len(decoding)))
        # the API server streams this step's tokens back after the requests that reached it
        # during the step: a client sees its tokens when that is done (the first round of a
        # closed loop, measured on the H100, gets its first tokens together, after the whole
        # round went in)
        take_in(now)
        emitted = len(decoding) + len(finished_prefill)
        if emitted and load.stream:
            front_free = max(front_free, now) + cal.output_step_s + emitted * cal.output_token_s
        seen = max(front_free, now)
        if decoding:
            res.gaps.append((seen - last_seen, len(decoding)))
        if emitted:
            last_seen = seen
        ctx_sum += len(decoding)
        # the decoding sequences emitted a token each; those at their last one end
        while finish and finish[0][0] <= step:
            _, rid = heapq.heappop(finish)
            ctx_sum -= decoding[rid].prompt + out
            end(decoding.pop(rid), seen)
        for r in finished_prefill:
            if r in prefilling:
                prefilling.remove(r)
            r.first = seen
            if out <= 1:
                end(r, r.first)
                continue
            decoding[r.id] = r
            ctx_sum += r.prompt + 1
            heapq.heappush(finish, (step + out - 1, r.id))
        step += 1
    res.wall_s = max(now, front_free)
    return res


def _done(res: Result, r: _Req, out: int) -> None:
    assert r.first is not None and r.end is not None
    res.ttft_s.append(r.first - r.arrival)
    res.e2e_s.append(r.end - r.arrival)
    if out > 1:
        res.tpot_s.append((r.end - r.first) / (out - 1))
    res.output_tokens += out
