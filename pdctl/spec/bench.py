"""The `bench` spec section: the load `pdctl bench` sends and the P/D canary's size.

Prompt and output lengths and the SLOs come from `workload` (what `pdctl plan` plans for), so
the bench measures the traffic the plan predicted."""

from pydantic import Field

from pdctl.spec.base import Section


class Bench(Section):
    """How `pdctl bench` loads the deployment (`vllm bench serve`, random dataset)."""

    requests: int = Field(
        32, ge=1, le=1_000_000, description="Requests per step (`--num-prompts`)."
    )
    duration_s: float | None = Field(
        None, gt=0, le=86_400, examples=[60],
        description="With `requestRate`: the step lasts about this long (requests = rate x "
        "duration, at least 1); `requests` is then ignored.",
    )
    request_rate: tuple[float, ...] = Field(
        (), max_length=32,
        description="Request-rate sweep (requests/s, Poisson arrivals): one step per rate. "
        "Empty with empty `concurrency`: one step sending every request at once.",
    )
    concurrency: tuple[int, ...] = Field(
        (), max_length=32,
        description="Concurrency sweep (`--max-concurrency`): one step per value, after the "
        "rate steps.",
    )
    range_ratio: float = Field(
        0.0, ge=0, lt=1,
        description="Prompt and output lengths are drawn from [n x (1 - r), n x (1 + r)] "
        "around workload.promptTokens / outputTokens.",
    )
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed of the prompts and the canary.")
    canary_prompts: int = Field(
        4, ge=0, le=64, description="P/D canary: prompts compared (0: no canary)."
    )
    canary_tokens: int = Field(
        16, ge=1, le=1024, description="P/D canary: greedy tokens that must agree per prompt."
    )
