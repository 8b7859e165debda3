"""LoRA adapters on the model (docs/lora.md): where each comes from and vLLM's LoRA limits.

The checks that need only the model live here; the ones that depend on the target (what it can
mount) or on the secrets (run-time loading needs the API key) live in plan/lora.py."""

import re
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from pdctl.errors import SpecError
from pdctl.spec.base import Section, matching, pattern, refuse
from pdctl.spec.value import Argument, Image, mountable

# The ranks vLLM's LoRAConfig accepts (vllm/config/lora.py: `possible_max_ranks`).
RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
HF_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
# An adapter's name is what clients put in `model`: no '=' (the `--lora-modules` separator).
NAME = r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$"


class Adapter(Section):
    """One LoRA adapter: its name and exactly one source."""

    name: str = Field(
        ...,
        pattern=pattern(
            NAME, "an adapter name: letters, digits, '.', '_', '/', ':' and '-', at most 128",
            "write the name clients put in a request's `model`, e.g. sql-lora",
        ),
        description="The name clients put in a request's `model` to use the adapter.",
    )
    hf: Annotated[Argument, matching(
        HF_ID, "is not a Hugging Face repository id (org/name)"
    )] | None = Field(
        None, description="Source: a Hugging Face repository id (org/name) holding the adapter."
    )
    revision: Argument | None = Field(
        None, description="With `hf`: the branch, tag or commit to fetch."
    )
    path: str | None = Field(
        None,
        description="Source: an absolute path to the adapter's folder on every host (hosts "
        "targets; docker mounts it read-only at the same path).",
    )
    claim: str | None = Field(
        None,
        description="Source (Kubernetes): an existing PersistentVolumeClaim holding the "
        "adapter, mounted read-only.",
    )
    sub_path: str | None = Field(
        None, description="With `claim`: the adapter's folder inside the claim."
    )
    image: Image | None = Field(
        None,
        description="Source (Kubernetes 1.31+ with the ImageVolume feature): an OCI image "
        "holding the adapter's files, mounted read-only as an image volume.",
    )
    rank: int | None = Field(
        None, ge=1, le=512, examples=[16],
        description="The adapter's rank `r` (its adapter_config.json), for the check against "
        "`maxLoraRank` and for `pdctl plan`.",
    )
    target_modules: tuple[str, ...] = Field(
        (),
        description="The modules the adapter targets (adapter_config.json `target_modules`), "
        "for `pdctl plan`. Default: all attention and MLP projections.",
    )
    base_model: Argument | None = Field(
        None,
        description="The base model the adapter was trained on: must be `model.name`; shown "
        "as the adapter's parent in /v1/models.",
    )

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"{value!r} must be an absolute path")
        return None if value is None else mountable(value)

    @model_validator(mode="after")
    def _one_source(self) -> "Adapter":
        given = [k for k in ("hf", "path", "claim", "image") if getattr(self, k) is not None]
        if len(given) != 1:
            what = "no source" if not given else f"{len(given)} sources ({', '.join(given)})"
            raise refuse(
                f"adapter {self.name} has {what}", "give exactly one of hf, path, claim or image"
            )
        if self.revision is not None and self.hf is None:
            raise refuse("revision is for an `hf` source", "remove revision")
        if self.sub_path is not None and self.claim is None:
            raise refuse("subPath is for a `claim` source", "remove subPath")
        return self

    @property
    def source(self) -> str:
        return next(k for k in ("hf", "path", "claim", "image") if getattr(self, k) is not None)


class Lora(Section):
    """LoRA adapters served on the base model (vLLM `--enable-lora`)."""

    adapters: tuple[Adapter, ...] = Field(
        (), description="Adapters loaded at start (`--lora-modules`)."
    )
    max_loras: int = Field(
        1, ge=1, le=256, description="Adapters in one batch on the GPU (`--max-loras`)."
    )
    max_lora_rank: int = Field(
        16,
        description="Largest adapter rank served (`--max-lora-rank`): one of "
        + ", ".join(map(str, RANKS))
        + ". GPU buffers are reserved at this rank.",
    )
    max_cpu_loras: int | None = Field(
        None, ge=1, le=4096,
        description="Adapters kept in host memory (`--max-cpu-loras`). Default: vLLM's "
        "(`maxLoras`).",
    )
    runtime_loading: bool = Field(
        False,
        description="Allow `pdctl adapters load|unload` (VLLM_ALLOW_RUNTIME_LORA_UPDATING): an "
        "admin surface, refused without `secrets.apiKey` (docs/security.md).",
    )

    @field_validator("max_lora_rank")
    @classmethod
    def _rank(cls, value: int) -> int:
        if value not in RANKS:
            raise ValueError(f"{value} is not a rank vLLM accepts ({', '.join(map(str, RANKS))})")
        return value

    @model_validator(mode="after")
    def _limits(self) -> "Lora":
        seen: dict[str, int] = {}
        for i, a in enumerate(self.adapters):
            where = f"model.lora.adapters[{i}]"
            if a.name in seen:
                raise SpecError(
                    f"adapter name {a.name!r} is used twice (adapters[{seen[a.name]}] and "
                    f"adapters[{i}])",
                    path=f"{where}.name", fix="give every adapter its own name",
                )
            seen[a.name] = i
            if a.rank is not None and a.rank > self.max_lora_rank:
                raise SpecError(
                    f"adapter {a.name} has rank {a.rank}, above maxLoraRank {self.max_lora_rank}"
                    " (vLLM refuses to load it)",
                    path=f"{where}.rank",
                    fix=f"set model.lora.maxLoraRank to at least {a.rank} (one of "
                    f"{', '.join(str(r) for r in RANKS if r >= a.rank)})",
                )
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise SpecError(
                f"maxCpuLoras {self.max_cpu_loras} is below maxLoras {self.max_loras} (vLLM "
                "refuses it)",
                path="model.lora.maxCpuLoras",
                fix=f"set maxCpuLoras to at least {self.max_loras}, or remove it",
            )
        return self


def check_names(lora: Lora, model_name: str, served: str | None) -> None:
    """No adapter may take the served model's name (a request would be ambiguous), and a
    declared base model must be the one served."""
    names = {model_name, served or model_name}
    for i, a in enumerate(lora.adapters):
        where = f"model.lora.adapters[{i}]"
        if a.name in names:
            raise SpecError(
                f"adapter name {a.name!r} is the served model's name", path=f"{where}.name",
                fix="rename the adapter: clients choose it by this name in `model`",
            )
        if a.base_model is not None and a.base_model != model_name:
            raise SpecError(
                f"adapter {a.name} was trained on {a.base_model}, but the model served is "
                f"{model_name}",
                path=f"{where}.baseModel",
                fix="serve it on its own base model, or correct baseModel",
            )


# Adapters fetched at a pinned revision: each engine's home (vLLM expands `~` in a LoRA path:
# vllm/lora/utils.py get_adapter_absolute_path). On hosts `$HOME/.cache/pdctl-adapters`
# (containers get it mounted at /root/.cache/pdctl-adapters); in pods an emptyDir there.
FETCHED = "~/.cache/pdctl-adapters"
FETCHED_IN_ROOT = "/root/.cache/pdctl-adapters"
# Kubernetes volumes (claim, image) of adapters are mounted here, one folder per adapter.
MOUNTED = "/adapters"


def safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


def folder(adapter: Adapter) -> str:
    """A fetched adapter's folder: its name and revision with anything but [A-Za-z0-9._-] as
    '_' (a new revision is a new folder, so the engine's command changes and `up` restarts it)."""
    return safe(f"{adapter.name}@{adapter.revision}")


def fetched(lora: Lora | None) -> tuple[Adapter, ...]:
    """The adapters pdctl downloads before the engine starts (an `hf` source at a revision)."""
    if lora is None:
        return ()
    return tuple(a for a in lora.adapters if a.hf is not None and a.revision is not None)


# Fetches one adapter: argv = repository, revision, folder; writes the revision it fetched.
FETCH_CODE = (
    "import sys; from huggingface_hub import snapshot_download as get; "
    "d = get(sys.argv[1], revision=sys.argv[2], local_dir=sys.argv[3]); "
    "open(d + '/.pdctl-revision', 'w').write(sys.argv[2])"
)


def host_paths(lora: Lora | None) -> tuple[str, ...]:
    """The adapters given as host paths (an engine container mounts each at the same path)."""
    if lora is None:
        return ()
    return tuple(sorted({a.path.rstrip("/") for a in lora.adapters if a.path}))
