"""Spec sections for prefill/decode disaggregation (phase 2) and HAMi-sliced decode (phase 3)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from pdctl.spec.base import Section


class Role(Section):
    """One side of prefill/decode: identical engine instances."""

    replicas: int = Field(1, ge=1, le=10_000, description="Number of instances.")
    tensor_parallel: int = Field(1, ge=1, le=64, description="GPUs per instance (TP).")
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="Fraction of GPU (or slice) memory vLLM may use."
    )
    max_num_seqs: int | None = Field(None, ge=1, le=65536, description="`--max-num-seqs`.")
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="`--max-num-batched-tokens`."
    )
    port: int | None = Field(
        None,
        ge=1024,
        le=65535,
        description="HTTP port of the first instance of this role on a host (bare metal). "
        "Default: 8100 for prefill, 8200 for decode.",
    )
    enforce_eager: bool = Field(False, description="Disable CUDA graphs (`--enforce-eager`).")
    extra_args: tuple[str, ...] = Field((), description="Extra `vllm serve` arguments.")


class Prefill(Role):
    """Prefill instances: compute-bound, on whole GPUs."""


class Share(Section):
    """HAMi GPU slice for each decode instance (phase 3)."""

    per_gpu: int = Field(
        2, ge=1, le=16, description="Decode slices packed on one physical GPU."
    )
    gpu_memory_percent: int | None = Field(
        None,
        ge=1,
        le=100,
        description="Slice size as a percentage of the GPU's memory "
        "(`nvidia.com/gpumem-percentage`). Default: 100 / perGpu.",
    )
    gpu_memory_mib: int | None = Field(
        None, ge=256, description="Slice size in MiB (`nvidia.com/gpumem`); instead of percent."
    )
    gpu_cores_percent: int | None = Field(
        None, ge=1, le=100, description="Share of the GPU's SMs (`nvidia.com/gpucores`)."
    )
    gpu_type: str | None = Field(
        None, description="Only GPUs whose type contains this (`nvidia.com/use-gputype`)."
    )
    policy: Literal["binpack", "spread"] | None = Field(
        None, description="HAMi GPU scheduler policy (`hami.io/gpu-scheduler-policy`)."
    )
    allow_tensor_parallel: bool = Field(
        False,
        description="Allow TP > 1 on slices (known to hang with HAMi-core SM limits); pdctl "
        "then adds `--disable-custom-all-reduce`.",
    )

    @model_validator(mode="after")
    def _one_size(self) -> Share:
        if self.gpu_memory_percent is not None and self.gpu_memory_mib is not None:
            raise ValueError("give gpuMemoryPercent or gpuMemoryMib, not both")
        return self


class Decode(Role):
    """Decode instances: memory-bandwidth bound; may be packed as GPU slices in phase 3."""

    share: Share | None = Field(None, description="HAMi slice per decode instance (phase 3).")


class Store(Section):
    """Mooncake shared KV store (`MooncakeStoreConnector` + `mooncake_master`)."""

    enabled: bool = Field(False, description="Run mooncake_master and add the store connector.")
    host: str | None = Field(None, description="Host (by name) that runs mooncake_master.")


class Disaggregation(Section):
    """How KV moves from prefill to decode."""

    connector: Literal["p2p-nccl", "mooncake", "nixl"] = Field(
        "nixl",
        description="`p2p-nccl` (vLLM <= 0.23.0), `mooncake`, or `nixl` (llm-d on Kubernetes, "
        "or bare metal).",
    )
    protocol: Literal["tcp", "rdma"] = Field(
        "tcp", description="Transport for mooncake (and NIXL's UCX): `rdma` needs RDMA NICs."
    )
    device_name: str | None = Field(
        None, description="RDMA device(s) for mooncake, e.g. `mlx5_0` (protocol rdma)."
    )
    kv_buffer_device: Literal["cuda", "cpu"] | None = Field(
        None, description="Where the connector stages KV (`kv_buffer_device`). Default: the "
        "engine device."
    )
    store: Store = Field(default_factory=Store, description="Mooncake shared KV store.")


class Router(Section):
    """The request router ("conductor") that sends each request to prefill, then decode."""

    port: int = Field(8000, ge=1024, le=65535, description="Port clients send requests to.")
    host: str | None = Field(
        None, description="Host (by name) that runs the router. Default: the first host."
    )
    version: str = Field("0.1.17", description="Pinned `vllm-router` package version.")
