"""Spec sections for prefill/decode disaggregation (phase 2) and HAMi-sliced decode (phase 3)."""

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from pdctl.compat import ROUTER_VERSION
from pdctl.errors import SpecError
from pdctl.spec.base import DnsLabel, Section, defaults, matching
from pdctl.spec.batching import BATCHED_TOKENS
from pdctl.spec.kube import PodSettings
from pdctl.spec.speculative import Speculative
from pdctl.spec.value import EngineEnv, HostDir

# fullmatch with [0-9]: `$` accepts a trailing newline and `\d` any Unicode digit ("0.1.١٧").
VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
DURATION = re.compile(r"([0-9]{1,5}(h|m|s|ms)){1,4}")  # Gateway API Duration (GEP-2257)
RDMA_DEVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")  # an HCA name, e.g. mlx5_0
RouterVersion = Annotated[str, matching(VERSION, "is not a version X.Y.Z (e.g. '0.1.17')")]
Duration = Annotated[str, matching(DURATION, "is not a Gateway API duration (e.g. '300s', '1h')")]


class Multinode(Section):
    """How one engine instance spans hosts (docs/multinode.md): `nodes` hosts per instance;
    with `dataParallel` > 1 each node runs dataParallel/nodes DP ranks (`--headless` on all but
    the first), else tensor x pipeline parallel is split across the nodes (`--nnodes`)."""

    nodes: int = Field(
        1, ge=1, le=64,
        description="Hosts one instance spans (a multi-node group: the first is the leader, "
        "the others run `--headless`). Each node takes tensorParallel x pipelineParallel x "
        "dataParallel / nodes GPUs on its own host.",
    )
    data_parallel: int = Field(
        1, ge=1, le=1024,
        description="Data-parallel ranks per instance (`--data-parallel-size`), spread evenly "
        "over its `nodes`; each rank has tensorParallel GPUs. For MoE models with "
        "`expertParallel` (wide EP); the leader's API server balances requests over them.",
    )
    expert_parallel: bool = Field(
        False,
        description="Shard MoE experts over the tensor x data parallel GPUs "
        "(`--enable-expert-parallel`) instead of tensor-slicing each expert.",
    )
    rendezvous_port: int | None = Field(
        None, ge=1024, le=65535, examples=[29501],
        description="Port on the leader node the group's nodes meet on: `--master-port` "
        "(TP/PP across nodes; default 29501, vLLM's) or `--data-parallel-rpc-port` (data "
        "parallel; default 29550, vLLM's). Further groups led from the same host take the "
        "next ports.",
    )
    guard_port: int | None = Field(
        None, ge=1024, le=65535, examples=[29700],
        description="Multi-node groups on hosts: the port of the first group guard on each "
        "node's address (default 29700); further nodes on the same "
        "address take the next ports. A group's guards ask each other whether every node is "
        "still there, and stop their node when one is gone, so the group restarts as one "
        "(docs/multinode.md#the-group-guard). Open it to the group's nodes.",
    )


class Role(Multinode):
    """One side of prefill/decode: identical engine instances."""

    replicas: int = Field(1, ge=1, le=10_000, description="Number of instances.")
    hosts: tuple[DnsLabel, ...] = Field(
        (),
        description="Bare metal: the hosts (by name) this role's instances may run on; "
        "pdctl spreads them over these only (docs/placement.md). Default: any host.",
    )
    tensor_parallel: int = Field(1, ge=1, le=64, description="GPUs per instance (TP).")
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1,
        description="Fraction of GPU (or, in phase 3, of the slice's) memory vLLM may use. "
        "Default: vLLM's own; for HAMi slices pdctl computes it from the slice size.",
    )
    max_num_seqs: int | None = Field(
        None, ge=1, le=65536, examples=[256], description="`--max-num-seqs`."
    )
    max_num_batched_tokens: int | None = Field(
        None, ge=1, examples=[8192], description=BATCHED_TOKENS,
    )
    port: int | None = Field(
        None, ge=1024, le=65535,
        description="HTTP port of the first instance of this role on a host (bare metal); "
        "further instances on the host take the next ports. Default: 8100 for prefill, 8200 "
        "for decode. On Kubernetes the ports are fixed (llm-d: prefill 8000, decode 8200 "
        "behind the sidecar on 8000).",
    )
    enforce_eager: bool = Field(False, description="Disable CUDA graphs (`--enforce-eager`).")
    speculative: Speculative | None = Field(
        None,
        description="Speculative decoding for this role's engines (`--speculative-config`; "
        "docs/spec.md#speculative-decoding). Usually on decode only.",
    )
    extra_args: tuple[str, ...] = Field((), description="Extra `vllm serve` arguments.")
    kubernetes: PodSettings | None = Field(
        None,
        description="On Kubernetes: settings of this role's pods over the `kubernetes` "
        "section's (maps merge, lists replace; docs/phase2-kubernetes.md).",
    )
    env: EngineEnv = Field(
        {},
        description="Extra environment for this role's engines (added to `engine.env`), e.g. "
        "`VLLM_CPU_OMP_THREADS_BIND`. Not for secrets, nor for the variables pdctl sets "
        "(`CUDA_VISIBLE_DEVICES`, `HF_HOME`, `VLLM_HOST_IP`, the NIXL side channel and "
        "Mooncake bootstrap/store variables).",
    )


class Prefill(Role):
    """Prefill instances: compute-bound, on whole GPUs."""


class Share(Section):
    """HAMi GPU slice for each decode instance (phase 3)."""

    per_gpu: int = Field(2, ge=1, le=16, description="Decode slices packed on one physical GPU.")
    gpu_memory_percent: int | None = Field(
        None, ge=1, le=100,
        description="Slice size as a percentage of the GPU's memory "
        "(`nvidia.com/gpumem-percentage`). Default: 100 / perGpu (rounded down).",
    )
    gpu_memory_mib: int | None = Field(
        None, ge=256, description="Slice size in MiB (`nvidia.com/gpumem`); instead of percent."
    )
    gpu_total_mib: int | None = Field(
        None, ge=1024,
        description="Memory of one physical GPU in MiB (e.g. 143771 for an H200), so pdctl can "
        "size percentage slices, check MiB packings and pick the utilization. Default: unknown.",
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
    enforce_eager: bool | None = Field(
        None,
        description="Run sliced decode with `--enforce-eager` (no CUDA graphs, whose "
        "profiling can overshoot a slice). Default: on when the slice is known to be smaller "
        "than 24 GiB.",
    )
    allow_tensor_parallel: bool = Field(
        False,
        description="Allow TP > 1 on slices (known to hang with HAMi-core SM limits); pdctl "
        "then adds `--disable-custom-all-reduce`.",
    )
    library: str | None = Field(
        None,
        description="Bare metal (phase 3 on hosts): absolute path of HAMi-core's `libvgpu.so` "
        "on every host that runs decode (e.g. `/usr/local/vgpu/libvgpu.so`), preloaded into "
        "each decode engine. pdctl does not build it; `pdctl preflight` checks it exports the "
        "CUDA hooks. Required on hosts; unused on Kubernetes (HAMi's device plugin preloads it).",
    )

    @field_validator("library")
    @classmethod
    def _library(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"{value!r} must be an absolute path (e.g. /opt/vgpu/libvgpu.so)")
        # The loader splits LD_PRELOAD at spaces and colons: such a path preloads nothing.
        if value is not None and any(c in value for c in " \t\n:"):
            raise ValueError(f"{value!r}: LD_PRELOAD cannot hold a path with spaces or colons")
        return value

    @model_validator(mode="after")
    def _one_size(self) -> "Share":
        # SpecError (not ValueError): load_text locates it, and the line names field and fix.
        if self.gpu_memory_percent is not None and self.gpu_memory_mib is not None:
            raise SpecError(
                "give gpuMemoryPercent or gpuMemoryMib, not both", path="decode.share.gpuMemoryMib",
                fix="remove gpuMemoryMib to size slices by percent, or gpuMemoryPercent",
            )
        return self


class Decode(Role):
    """Decode instances: memory-bandwidth bound; may be packed as GPU slices in phase 3."""

    share: Share | None = Field(None, description="HAMi slice per decode instance (phase 3).")


class Store(Section):
    """Mooncake shared KV store (`MooncakeStoreConnector` + `mooncake_master`)."""

    enabled: bool = Field(False, description="Run mooncake_master and add the store connector.")
    host: str | None = Field(
        None, description="Host (by name) that runs mooncake_master. Default: the router's host."
    )
    rpc_port: int = Field(50051, ge=1024, le=65535, description="mooncake_master RPC port.")
    metrics_port: int = Field(
        9003, ge=1024, le=65535, description="mooncake_master admin/metrics HTTP port."
    )
    metadata_port: int = Field(
        8080, ge=1024, le=65535,
        description="Port of the master's embedded HTTP metadata server for the transfer engines.",
    )
    global_segment_gib: int = Field(
        4, ge=1, le=4096, description="Memory each engine contributes to the pool, GiB."
    )
    local_buffer_gib: int = Field(1, ge=1, le=1024, description="Local transfer buffer, GiB.")


class Disaggregation(Section):
    """How KV moves from prefill to decode."""

    connector: Literal["p2p-nccl", "mooncake", "nixl"] = Field(
        "nixl",
        description="`p2p-nccl` (vLLM <= 0.23.0), `mooncake`, or `nixl` (llm-d on Kubernetes, "
        "or bare metal).",
    )
    protocol: Literal["tcp", "rdma"] = Field(
        "tcp", description="Transport for mooncake: `rdma` needs RDMA NICs."
    )
    device_name: str | None = Field(
        None, description="RDMA device(s) for mooncake, e.g. `mlx5_0,mlx5_1` (protocol rdma)."
    )
    kv_buffer_device: Literal["cuda", "cpu"] | None = Field(
        None,
        description="nixl: where the connector stages KV (`kv_buffer_device`). Default: the "
        "engine device (`cpu` is written out for CPU engines).",
    )
    kv_port: int = Field(
        21001, ge=1024, le=65000,
        description="p2p-nccl: first ZMQ port on a host; each instance takes a block of "
        "tensorParallel ports (`kv_port + tp_rank`).",
    )
    gpu_memory_gib: float | None = Field(
        None, gt=0, examples=[80],
        description="p2p-nccl: memory of one GPU in GiB, to size the decode `kv_buffer_size` "
        "(10% of it in bytes, the upstream rule of thumb). Default: 8e9 bytes, the upstream "
        "example.",
    )
    bootstrap_port: int = Field(
        8998, ge=1024, le=65535,
        description="mooncake: first `VLLM_MOONCAKE_BOOTSTRAP_PORT` on a host (one per "
        "prefill instance).",
    )
    side_channel_port: int = Field(
        5600, ge=1024, le=65535,
        description="nixl: first `VLLM_NIXL_SIDE_CHANNEL_PORT` on a host; each further "
        "instance on the host takes the next port.",
    )
    store: Store = defaults(description="Mooncake shared KV store.")

    @model_validator(mode="after")
    def _checks(self) -> "Disaggregation":
        if self.store.enabled and self.connector != "mooncake":
            raise SpecError(
                f"store.enabled needs connector mooncake (connector is {self.connector})",
                path="disaggregation.store.enabled",
                fix="set disaggregation.connector: mooncake, or remove the store",
            )
        if self.device_name is not None and self.protocol != "rdma":
            raise SpecError(
                f"deviceName applies to protocol rdma only (protocol is {self.protocol})",
                path="disaggregation.deviceName",
                fix="set disaggregation.protocol: rdma, or remove deviceName",
            )
        names = (self.device_name or "mlx5_0").split(",")
        if not all(RDMA_DEVICE.fullmatch(n) for n in names):
            raise SpecError(
                f"deviceName {self.device_name!r} has an empty or malformed entry",
                path="disaggregation.deviceName",
                fix="list RDMA device names separated by single commas, e.g. mlx5_0,mlx5_1 "
                "(`ibv_devices` shows them)",
            )
        if self.kv_buffer_device is not None and self.connector != "nixl":
            raise SpecError(
                f"kvBufferDevice applies to connector nixl only (connector is {self.connector})",
                path="disaggregation.kvBufferDevice",
                fix="remove kvBufferDevice, or use connector nixl",
            )
        return self


class Router(Section):
    """The request router ("conductor") that sends each request to prefill, then decode.

    On hosts it is `vllm-router`; on Kubernetes the llm-d endpoint picker (EPP) plays the role.
    Phase 0: a `router` section (`router: {}` takes every default) puts `vllm-router` in its
    plain mode in front of the replicas, as the one endpoint (docs/phase0-hosts.md).
    """

    port: int = Field(
        8090, ge=1024, le=65535,
        description="Port clients send requests to. The default 8090 is no default port of an "
        "engine (8000 and up, prefill 8100 and up, decode 8200 and up), a Mooncake service "
        "(8080, 8998, 9003) or a metrics port, so `router: {}` runs beside the engines on "
        "one host.",
    )
    host: str | None = Field(
        None, description="Host (by name) that runs the router. Default: the first host."
    )
    listen: str | None = Field(
        None,
        description="Bare metal: the IP address `vllm-router` listens on for clients (`--host`; "
        "its Prometheus metrics listen there too). vllm-router 0.1.17 has no client "
        "authentication and, in PD mode, sends the engines' API key itself: whoever reaches "
        "this address is authenticated to the engines. Default: the router host's "
        "`addressForPeers` (or `address`), or `127.0.0.1` when the router and every engine "
        "run on one host. `0.0.0.0` (every address) only when you write it. With "
        "`secrets.apiKey` and a default that is not loopback, pdctl asks you to set it (PD mode; "
        "phase 0's plain mode forwards each client's key to the engines).",
    )
    version: RouterVersion = Field(
        ROUTER_VERSION, description="Pinned `vllm-router` package version."
    )
    venv: HostDir | None = Field(
        None,
        description="Python environment holding `bin/vllm-router` (created with the pinned "
        "version if missing). Default: `~/.pdctl/venv/vllm-router-<version>`.",
    )
    policy: Literal[
        "random", "round_robin", "cache_aware", "power_of_two", "consistent_hash",
        "sticky_least_loaded",
    ] = Field(
        "round_robin",
        description="`--policy`: for prefill and decode, or (phase 0) across the replicas. "
        "`power_of_two` and `sticky_least_loaded` pick by load, `cache_aware` by prefix.",
    )
    health_check_interval_secs: int = Field(
        3, ge=1, le=600,
        description="How often the router checks engines (`--health-check-interval-secs`); "
        "its default of 60 s sends traffic to a dead engine for minutes.",
    )
    discovery_port: int = Field(
        30001, ge=1024, le=65535,
        description="p2p-nccl: ZMQ port where engines register (`--vllm-discovery-address`).",
    )
    metrics_port: int = Field(
        29000, ge=1024, le=65535, description="Router Prometheus port (`--prometheus-port`)."
    )
    wait_minutes: int = Field(
        60, ge=1, le=1440,
        description="How long the router waits for every engine's /health before it starts.",
    )
    gateway: str | None = Field(
        None,
        description="Kubernetes: name of an existing Gateway; pdctl renders an HTTPRoute from "
        "it to the InferencePool.",
    )
    kubernetes: PodSettings | None = Field(
        None,
        description="On Kubernetes: settings of the endpoint picker (EPP) pod. It takes only "
        "the `kubernetes` section's labels, annotations and imagePullSecrets; its resources "
        "default to 1 CPU / 1Gi requested, 4 / 4Gi limit.",
    )
    # Gateway API Duration (GEP-2257), as the HTTPRoute CRD's pattern checks it.
    request_timeout: Duration | None = Field(
        "300s",
        description="Kubernetes: the HTTPRoute's `timeouts.request` (Gateway API duration, e.g. "
        "`300s`, `1h`), as llm-d's chart sets it; without it some Gateways cut long answers "
        "(Envoy's default route timeout is 15 s). `null` leaves it out (llm-d's chart does on "
        "GKE).",
    )

    @field_validator("listen")
    @classmethod
    def _ip(cls, value: str | None) -> str | None:
        # vllm-router parses --prometheus-host as an IP and falls back to 0.0.0.0 on anything
        # else (src/metrics.rs), so a host name would silently open the metrics to everyone.
        if value is not None:
            try:
                ipaddress.ip_address(value)
            except ValueError:
                raise ValueError(
                    f"{value!r} is not an IP address (e.g. 127.0.0.1, 10.0.0.10 or ::1)"
                ) from None
        return value

