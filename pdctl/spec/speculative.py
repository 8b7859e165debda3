"""Spec sections for speculative decoding (`serve.speculative`, `prefill`/`decode`) and KV
offloading to host memory (`engine.kvOffload`). docs/spec.md#speculative-decoding and
#kv-offloading say what each renders to; the keys are vLLM's `SpeculativeConfig` fields
(vllm/config/speculative.py, the same in 0.23.0 and 0.33.0)."""

from typing import Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from pdctl.spec.base import Section, refuse
from pdctl.spec.value import Argument

# Methods both pinned versions accept (SpeculativeMethod in vllm/config/speculative.py: 0.23.0
# l.59-68, 0.33.0 l.74-82). vLLM's model-specific MTP names (deepseek_mtp, qwen3_next_mtp, ...)
# are deprecated aliases it rewrites to `mtp`.
SpecMethod = Literal["eagle", "eagle3", "mtp", "ngram", "draft_model"]
DRAFTED = ("eagle", "eagle3", "draft_model")  # a separate draft checkpoint is required


class Speculative(Section):
    """Speculative decoding: rendered as `--speculative-config '<json>'`."""

    method: SpecMethod = Field(
        ...,
        description="`eagle` / `eagle3` (an EAGLE head in `model`), `mtp` (the target "
        "model's own multi-token-prediction layers: DeepSeek, Qwen3-Next, GLM-4.5 ...), "
        "`ngram` (prompt lookup, no draft model) or `draft_model` (a small model of the same "
        "vocabulary in `model`).",
    )
    model: Argument | None = Field(
        None,
        description="The draft: a Hugging Face id or absolute path of the EAGLE head or draft "
        "model. Required for eagle, eagle3 and draft_model; not for ngram; for mtp default "
        "the target model itself.",
    )
    num_speculative_tokens: int = Field(
        ..., ge=1, le=64, examples=[3],
        description="Tokens proposed per step (`num_speculative_tokens`).",
    )
    config: str | None = Field(
        None, min_length=1, max_length=4096,
        description="Local path of the draft's config.json (relative to the spec file) so "
        "that `pdctl plan` counts a draft that is not in its model table: its layers, KV and "
        "weights. Read by pdctl only; not passed to vLLM. eagle, eagle3 and draft_model.",
    )
    draft_tensor_parallel: int | None = Field(
        None, ge=1, le=64,
        description="Tensor parallelism of the draft (`draft_tensor_parallel_size`): 1 or the "
        "role's tensorParallel (vLLM refuses anything else). Default: the role's.",
    )
    prompt_lookup_min: int | None = Field(
        None, ge=1, le=1024,
        description="ngram only: the shortest n-gram matched in the prompt. Default: vLLM's "
        "(5, or prompt_lookup_max when only that is given).",
    )
    prompt_lookup_max: int | None = Field(
        None, ge=1, le=1024,
        description="ngram only: the longest n-gram matched in the prompt. Default: vLLM's "
        "(5, or prompt_lookup_min when only that is given).",
    )

    _draft: dict[str, Any] | None = PrivateAttr(None)

    @property
    def draft_config(self) -> dict[str, Any] | None:
        """`config`'s values, set by pdctl.inputs when the spec is read (None: not given)."""
        return self._draft

    @model_validator(mode="after")
    def _combination(self) -> "Speculative":
        m = self.method
        if m == "ngram" and self.model is not None:
            raise refuse(
                "method ngram proposes from the prompt itself and takes no draft model",
                "remove `model`, or choose eagle, eagle3 or draft_model for a draft",
            )
        if m == "ngram" and self.draft_tensor_parallel is not None:
            raise refuse(
                "method ngram runs no draft model, so draftTensorParallel means nothing",
                "remove draftTensorParallel",
            )
        if m not in DRAFTED and self.config is not None:
            raise refuse(
                f"method {m} has no draft model whose config.json could be read",
                "remove `config` (mtp reads the target's own config: model.config)",
            )
        if m in DRAFTED and self.model is None:
            raise refuse(
                f"method {m} needs the draft checkpoint in `model`",
                "set `model:` to the EAGLE head or draft model (Hugging Face id or path)",
            )
        lookup = self.prompt_lookup_min is not None or self.prompt_lookup_max is not None
        if m != "ngram" and lookup:
            raise refuse(
                f"promptLookupMin/promptLookupMax are for method ngram, not {m}",
                "remove them, or set `method: ngram`",
            )
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is not None and hi is not None and lo > hi:
            raise refuse(
                f"promptLookupMin {lo} is above promptLookupMax {hi}",
                "make promptLookupMin <= promptLookupMax",
            )
        return self


class KvOffload(Section):
    """KV-cache offloading to host memory: a second KV tier in each engine's host RAM."""

    size_gib: float = Field(
        ..., gt=0, le=65536, examples=[64],
        description="Host memory per engine instance for offloaded KV blocks, in GiB (all "
        "its tensor-parallel ranks together; vLLM's `kv_offloading_size`). `pdctl plan` "
        "shows what each host holds.",
    )
    backend: Literal["native", "lmcache"] = Field(
        "native",
        description="`native`: vLLM's own CPU offloading (OffloadingConnector; alone "
        "`--kv-offloading-size`); `lmcache`: LMCache's connector (LMCacheConnectorV1, "
        "local CPU backend, configured through LMCACHE_* variables; the `lmcache` package "
        "must be installed in the engine's environment or image). With prefill/decode both "
        "combine with the P/D connector through MultiConnector. Neither runs with "
        "`engine.device: cpu` (vLLM's CPU platform has no KV offloading): refused there.",
    )
