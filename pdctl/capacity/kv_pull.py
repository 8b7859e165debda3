"""How many descriptors prefill's MooncakeConnector writes in one batch for a decode's KV pull,
and whether Mooncake's TCP transport can hold them (pdctl/plan/mooncake_tcp.py).

vLLM 0.23.0's MooncakeConnector (mooncake_connector.py `_build_transfer_params`) writes, per
request, one descriptor per KV region (K and V of each layer; one latent with MLA) per run of
blocks that are consecutive on both prefill and decode (`group_concurrent_contiguous`), and
sends the requests that are ready together as one `batch_transfer_sync_write`. On a fresh
engine a request's blocks are consecutive: one descriptor per region. But the block pool hands
out the blocks freed last, and frees a request's blocks in reverse order (0.23.0
v1/core/single_type_kv_cache_manager.py `free`, block_pool.py `free_blocks`,
`get_new_blocks`), so once the pool has been used through, no two blocks of a request follow
each other: one descriptor per region per block (benchmarks/vllm_block_runs.py runs vLLM's own
block pool). The figures here are for that steady state."""

from __future__ import annotations

from dataclasses import dataclass

from pdctl.capacity.models import ModelConfig
from pdctl.capacity.params import model_config
from pdctl.errors import SpecError
from pdctl.plan import mooncake_tcp
from pdctl.plan.args import batch_limit, flag_values
from pdctl.spec.model import Spec
from pdctl.spec.workload import Workload

DEFAULT_DECODE_BATCH = 256  # vLLM's max_num_seqs where a decode sets none (its smallest default)
DEFAULT_KV_REGIONS = 72  # a model pdctl does not know: 36 layers x K and V, as Qwen3-8B
DEFAULT_MODEL_LEN = 32768  # a model pdctl does not know
BLOCK = 16  # vLLM's KV block (tokens) on GPUs, unless --block-size says otherwise


@dataclass(frozen=True)
class Pull:
    regions: int  # KV regions a request's blocks are copied from: 2 per layer, 1 with MLA
    block: int  # tokens per KV block
    prompt_tokens: int  # the workload's mean prompt, within max_model_len
    model_len: int  # the longest prompt: max_model_len
    seqs: int  # decode's max_num_seqs

    @staticmethod
    def blocks(tokens: int, block: int) -> int:
        return -(-tokens // block)

    def descriptors(self, tokens: int) -> int:
        """Descriptors of one prompt of `tokens` tokens' KV, fragmented."""
        return self.regions * self.blocks(tokens, self.block)

    @property
    def per_request(self) -> int:
        """Descriptors of one mean prompt's KV, fragmented."""
        return self.descriptors(self.prompt_tokens)

    @property
    def step(self) -> int:
        """Descriptors of a decode step that takes its whole batch of mean prompts at once."""
        return self.seqs * self.per_request

    @property
    def longest(self) -> int:
        """Descriptors of one prompt of max_model_len tokens."""
        return self.descriptors(self.model_len)


def kv_pull(spec: Spec, model: ModelConfig | None) -> Pull:
    """The KV pull of `spec`'s decode, for `model` (None: a model pdctl does not know)."""
    regions = DEFAULT_KV_REGIONS if model is None else (
        model.layers if model.is_mla else 2 * model.layers)
    d = spec.decode
    args = (*spec.engine.extra_args, *(d.extra_args if d is not None else ()))
    size = flag_values(args).get("--block-size", "")
    block = int(size) if size.isdigit() and int(size) > 0 else BLOCK
    model_len = spec.model.max_model_len or (model.max_position if model else DEFAULT_MODEL_LEN)
    prompt = (spec.workload or Workload()).prompt_tokens
    seqs = (batch_limit(d.max_num_seqs, spec, d.extra_args) if d is not None
            else None) or DEFAULT_DECODE_BATCH
    return Pull(regions, block, min(prompt, model_len), model_len, seqs)


def over_tcp(spec: Spec) -> bool:
    """Whether `spec` is P/D over Mooncake's TCP transport, whose queue to a peer bounds a
    pull."""
    dis = spec.disaggregation
    return spec.disaggregated and dis is not None and dis.connector == "mooncake" and (
        dis.protocol == "tcp")


def room(spec: Spec) -> int:
    """Descriptors one batch from a prefill to a decode can hold: the prefill's environment
    (its role's, then the engine's) over what pdctl sets."""
    role = spec.prefill.env if spec.prefill is not None else {}
    return mooncake_tcp.room(role, spec.engine.env)


def pull_notes(spec: Spec, model: ModelConfig) -> tuple[str, ...]:
    """One line for `pdctl plan` on Mooncake over TCP: how many mean prompts, and how long a
    prompt, one KV pull to a decode can carry."""
    if not over_tcp(spec):
        return ()
    p = kv_pull(spec, model)
    most = room(spec)
    tokens = most // p.regions * p.block
    longer = f" (maxModelLen {p.model_len:,} is longer)" if p.longest > most else ""
    who = "pdctl" if most == mooncake_tcp.CAPACITY else "the spec"
    return (
        f"Mooncake over TCP: one KV pull to a decode holds {most:,} descriptors ({who}'s "
        f"MC_TCP_ settings); once the KV cache is fragmented a request of "
        f"{p.prompt_tokens:,} prompt tokens takes {p.per_request:,} ({p.regions} KV regions x "
        f"{p.blocks(p.prompt_tokens, p.block)} blocks of {p.block} tokens), so at most "
        f"{most // p.per_request:,} such requests in flight to one decode fit (the pulls of "
        "its steps share that room), and prompts up "
        f"to {tokens:,} tokens{longer}; a larger pull is refused and its requests wait on "
        "decode: protocol rdma has no such queue, a larger --block-size makes fewer "
        "descriptors (docs/phase2-bare-metal.md)",
    )


def known_model(spec: Spec) -> ModelConfig | None:
    """The spec's model from pdctl's table (`model.name`); None where pdctl does not know it
    (the caller that read `model.config` passes its own)."""
    try:
        return model_config(spec.model.name, None, spec.model.params_billion)
    except SpecError:
        return None


def carried(spec: Spec, prompt_tokens: int, model: ModelConfig | None) -> int | None:
    """For Mooncake over TCP: how many requests of `prompt_tokens` may be in flight to one
    decode at once so that every KV pull to it fits what the transport holds, once the KV
    cache is fragmented. The pulls of one decode's scheduler steps share the queue to that
    prefill, so the bound is on the requests in flight, not on one step's. At least 1 (a longer
    prompt alone is refused: `pdctl plan` says so); None where there is no such queue."""
    if not over_tcp(spec):
        return None
    return max(1, room(spec) // kv_pull(spec, model).descriptors(prompt_tokens))
