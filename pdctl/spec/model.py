"""The pdctl spec: frozen pydantic models. Docs and the JSON Schema are generated from these."""

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from pdctl.errors import SpecError
from pdctl.spec.autoscaling import Autoscaling
from pdctl.spec.base import DnsLabel, Section, defaults, pattern, refuse
from pdctl.spec.batching import BATCHED_TOKENS, check_batching
from pdctl.spec.bench import Bench
from pdctl.spec.kube import (
    Kubernetes,
    PodSettings,
    Resources,
    Storage,
    Toleration,
    section_mounts,
)
from pdctl.spec.lora import Lora, check_names
from pdctl.spec.pd import VERSION, Decode, Disaggregation, Multinode, Prefill, Router
from pdctl.spec.speculative import KvOffload, Speculative
from pdctl.spec.value import (
    Address,
    Argument,
    CondaEnv,
    EngineEnv,
    HostDir,
    Image,
    MountableDir,
    SecretEnvName,
    SecretKey,
    UserName,
    mountable,
)
from pdctl.spec.workload import Hardware, Workload

# Kubernetes and its parts live in spec/kube.py; imported here for older importers.
__all__ = ["Kubernetes", "Resources", "Spec", "Storage", "Toleration"]

NAME_MAX = 50


class Model(Section):
    """What to serve."""

    name: Argument = Field(
        min_length=1,
        description="Hugging Face model id (org/name) or an absolute path to a model directory "
        "on the hosts / in the model-cache volume.",
    )
    served_name: Argument | None = Field(
        None, description="Name clients use in requests (`--served-model-name`). Default: `name`."
    )
    max_model_len: int | None = Field(
        None, ge=16, le=10_000_000,
        description="Longest sequence (prompt + output) in tokens (`--max-model-len`). "
        "Default: the model's own limit.",
    )
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] = Field(
        "auto", description="Weight and activation dtype (`--dtype`)."
    )
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = Field(
        "auto", description="KV-cache dtype (`--kv-cache-dtype`); fp8 halves KV memory."
    )
    trust_remote_code: bool = Field(
        False, description="Allow the model's own Python code (`--trust-remote-code`)."
    )
    revision: Argument | None = Field(None, description="Model revision: branch, tag or commit.")
    config: str | None = Field(
        None,
        description="Local path to the model's `config.json` for `pdctl plan` (capacity "
        "planning). Relative paths are relative to the spec file.",
    )
    params_billion: float | None = Field(
        None, gt=0, examples=[8],
        description="Parameter count in billions, for capacity planning when the model is "
        "not in pdctl's table and `config` gives no count.",
    )

    lora: Lora | None = Field(
        None, description="LoRA adapters served on this model (docs/lora.md)."
    )

    @field_validator("name")
    @classmethod
    def _model_path(cls, value: str) -> str:
        return mountable(value) if value.startswith("/") else value

    @model_validator(mode="after")
    def _adapter_names(self) -> "Model":
        if self.lora is not None:
            check_names(self.lora, self.name, self.served_name)
        return self


class Engine(Section):
    """The vLLM engine: the pinned version drives image tags, pip pins and what flags exist."""

    version: str = Field(
        "0.33.0",
        description="vLLM version X.Y.Z. Pins the image `vllm/vllm-openai:vX.Y.Z` and the pip "
        "package `vllm==X.Y.Z`, and selects which flags and KV connectors exist.",
    )
    image: Image | None = Field(
        None, description="Container image override. Default: `vllm/vllm-openai:v<version>`."
    )
    device: Literal["cuda", "cpu"] = Field(
        "cuda",
        description="`cuda` for NVIDIA GPUs; `cpu` runs vLLM's CPU build from a prepared Python "
        "environment (host runtime `venv`), for tests and small models. No GPUs are assigned.",
    )
    extra_args: tuple[str, ...] = Field(
        (), description="Extra `vllm serve` arguments appended to every instance."
    )
    env: EngineEnv = Field(
        {},
        description="Extra environment variables for every engine process. Not for secrets: "
        "use `secrets`.",
    )
    kv_offload: KvOffload | None = Field(
        None,
        description="Offload KV blocks to host memory (a second KV tier; docs/spec.md"
        "#kv-offloading): `sizeGib` per engine, backend native or lmcache.",
    )

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not VERSION.fullmatch(value):
            raise ValueError(f"{value!r} is not a version X.Y.Z (e.g. '0.33.0')")
        major, minor, _ = (int(p) for p in value.split("."))
        if (major, minor) < (0, 10):
            raise ValueError(f"vLLM {value} is older than 0.10.0, which pdctl does not support")
        return value


class SecretRef(Section):
    """A secret, by reference only: its value never appears in the spec or rendered files."""

    env: SecretEnvName = Field(
        ...,
        description="On hosts: the local environment variable `pdctl up` reads the value from; "
        "it is written to a 0600 file on the host, never on a command line.",
    )
    secret_name: DnsLabel | None = Field(
        None,
        description="On Kubernetes: the name of an existing Secret holding the value. "
        "Default: `<name>-<env in lower case with '-'>`.",
    )
    secret_key: SecretKey = Field("token", description="On Kubernetes: the key inside the Secret.")


class Secrets(Section):
    """Secrets by reference."""

    hf_token: SecretRef | None = Field(
        None, description="Hugging Face token for gated models (exported as `HF_TOKEN`)."
    )
    api_key: SecretRef | None = Field(
        None,
        description="API key the engines require from clients (exported as `VLLM_API_KEY`, "
        "never passed as `--api-key`).",
    )


class Host(Section):
    """A machine reached over SSH (phases 0, 2 and 3 on bare metal)."""

    name: DnsLabel = Field(..., description="Short name used in file and process names.")
    address: Address = Field(..., min_length=1, description="IP address or DNS name for SSH.")
    port: int = Field(22, ge=1, le=65535, description="SSH port.")
    user: UserName | None = Field(
        None, description="SSH user. Default: your local user name (as ssh does)."
    )
    identity_file: str | None = Field(
        None,
        description="SSH private key on the machine running pdctl. Default: ssh-agent "
        "and ~/.ssh keys.",
    )
    gpus: tuple[int, ...] = Field(
        (),
        description="GPU indices pdctl may use on this host (as `nvidia-smi` numbers them). "
        "Empty only with `engine.device: cpu`.",
    )
    instances: int | None = Field(
        None, ge=1, le=64,
        description="How many engine instances this host runs. Default: as many as its GPUs "
        "hold, until the replicas are placed.",
    )
    runtime: Literal["conda", "docker", "venv"] = Field(
        "conda",
        description="`conda`: a conda env with pip-installed vLLM; `docker`: `docker run` of "
        "the pinned image; `venv`: an existing Python environment (see `venv`). Default: "
        "`venv` when only `venv` is given, else `conda`.",
    )
    conda_env: CondaEnv | None = Field(
        None, description="Conda environment name. Default: `pdctl-vllm-<version>`."
    )
    venv: HostDir | None = Field(
        None,
        description="Runtime `venv`: path of the Python environment whose `bin/vllm` runs the "
        "engine (created with the pinned vLLM if it does not exist).",
    )
    restart: str = Field(
        "unless-stopped",
        pattern=pattern(
            r"^(no|always|unless-stopped|on-failure(:[1-9][0-9]{0,3})?)$",
            "a Docker restart policy: no, always, unless-stopped, on-failure or on-failure:N",
            "write e.g. unless-stopped or on-failure:5 (docker run --restart)",
        ),
        description="Runtime `docker`: the engine containers' restart policy (`docker run "
        "--restart`): `unless-stopped` brings a container whose process died back (and after "
        "a reboot of the Docker daemon), `on-failure[:N]` only after a non-zero exit (at most "
        "N times), `always`, or `no`. `pdctl down` stops and removes the containers, so none "
        "comes back after it.",
    )
    supervise: Literal["auto", "systemd", "none"] = Field(
        "auto",
        description="Runtimes `conda` and `venv`: who keeps the engines running. `systemd`: a "
        "systemd unit per process (a system unit when the SSH user is root, else a user unit, "
        "which needs lingering), restarted on failure with a backoff and a start limit, started "
        "again at boot, its log in the journal; `none`: started with nohup, nothing restarts a "
        "process that dies; `auto`: systemd where the host runs it (PID 1 systemd, and lingering "
        "for a non-root user), else nohup (said in `up` and `status`).",
    )
    log_max_size: str = Field(
        "100m",
        pattern=pattern(
            r"^[1-9][0-9]{0,5}[kmg]$", "a log file size: a number with k, m or g (e.g. 100m)",
            "write e.g. 100m (docker's json-file max-size)",
        ),
        description="The size at which a log is rotated: a container's json-file log "
        "(`--log-opt max-size`), or the log file of a process started with nohup "
        "(`supervise: none`, or `auto` without systemd; under systemd the journal keeps logs, "
        "within journald's own limits).",
    )
    log_max_files: int = Field(
        5, ge=1, le=100,
        description="How many log files a container (`--log-opt max-file`) or a nohup'd "
        "process keeps, the current one included: at most `logMaxSize` x `logMaxFiles` of log "
        "per unit.",
    )
    network: Literal["bridge", "host"] = Field(
        "bridge",
        description="Runtime `docker`: the network of a phase 0 engine container: `bridge` "
        "publishes its port (`-p PORT:8000`), `host` runs it on the host's network, listening "
        "on the spec's port itself. Prefill/decode engines and multi-node group nodes always "
        "run on the host's network.",
    )
    data_dir: HostDir = Field(
        "~/.pdctl",
        description="Folder on the host for scripts, pid files, logs and the env file. "
        "`~/` means the SSH user's home.",
    )
    hf_cache: MountableDir = Field(
        "~/.cache/huggingface", description="Hugging Face cache folder on the host."
    )
    address_for_peers: Address | None = Field(
        None,
        description="Address other hosts use to reach this one (KV transfer, router). "
        "Default: `address`.",
    )
    network_interface: str | None = Field(
        None,
        pattern=pattern(
            r"^[A-Za-z0-9_.:-]{1,15}$",
            "an interface name: letters, digits, '_', '.', ':' and '-', at most 15 characters",
            "write the name `ip -br addr` shows on the host, e.g. eth1",
        ),
        description="Network interface that holds `addressForPeers` (e.g. `eth1`). Multi-node "
        "groups export it as NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME, so NCCL and Gloo do "
        "not pick a wrong interface (docs/multinode.md). Default: left to NCCL.",
    )
    rdma_devices: tuple[str, ...] = Field(
        (),
        description="RDMA devices (HCAs, e.g. `mlx5_0`): the host has RDMA. Multi-node "
        "groups export them as NCCL_IB_HCA (and NVSHMEM_HCA_LIST with expertParallel); "
        "`runtime: docker` passes /dev/infiniband, IPC_LOCK and memlock into the containers; "
        "RDMA-only transports (an RDMA-only UCX_TLS, Mooncake protocol rdma, DeepEP) on a host "
        "without them are warned (refused in containers). Preflight checks they exist with an "
        "ACTIVE port.",
    )

    @model_validator(mode="before")
    @classmethod
    def _infer_runtime(cls, data: Any) -> Any:
        """Only `venv` given: runtime venv (only `condaEnv`, or neither: conda)."""
        if not isinstance(data, dict) or "runtime" in data:
            return data
        venv = data.get("venv") is not None
        conda = data.get("condaEnv", data.get("conda_env")) is not None
        return {**data, "runtime": "venv"} if venv and not conda else data

    @field_validator("conda_env", "venv")
    @classmethod
    def _for_runtime(cls, value: str | None, info: ValidationInfo) -> str | None:
        """`condaEnv` belongs to runtime conda and `venv` to runtime venv: either with another
        runtime (or both on one host) would be silently ignored."""
        own = "conda" if info.field_name == "conda_env" else "venv"
        runtime = info.data.get("runtime")
        if value is None or runtime is None or runtime == own:
            return value
        key = "condaEnv" if own == "conda" else "venv"
        both = own == "venv" and info.data.get("conda_env") is not None
        said = "runtime conda (condaEnv is given too)" if both else f"runtime {runtime}"
        raise refuse(
            f"{key} is for runtime {own}, but this host runs {said}",
            f"remove {key}, or set `runtime: {own}`" + (" and remove condaEnv" if both else ""),
        )

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"GPU indices repeat: {list(value)}")
        if any(g < 0 or g > 63 for g in value):
            raise ValueError(f"GPU indices must be 0..63 (got {list(value)})")
        return value


class Serve(Multinode):
    """The serving shape for phases 0 and 1: identical engine instances."""

    replicas: int = Field(1, ge=1, le=10_000, description="Number of engine instances.")
    hosts: tuple[DnsLabel, ...] = Field(
        (),
        description="Phase 0: the hosts (by name) the instances may run on; pdctl spreads "
        "them over these only (docs/placement.md). Default: any host.",
    )
    tensor_parallel: int = Field(
        1, ge=1, le=64, description="GPUs per instance for tensor parallelism."
    )
    pipeline_parallel: int = Field(1, ge=1, le=64, description="Pipeline-parallel stages.")
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1,
        description="Fraction of each GPU's memory vLLM may use. Default: vLLM's own (0.92 since "
        "0.2x; 0.9 before).",
    )
    max_num_seqs: int | None = Field(
        None, ge=1, le=65536, examples=[256], description="`--max-num-seqs`."
    )
    max_num_batched_tokens: int | None = Field(
        None, ge=1, examples=[8192], description=BATCHED_TOKENS,
    )
    port: int = Field(
        8000, ge=1024, le=65535,
        description="HTTP port of the first instance on a host; further instances take the "
        "next ports.",
    )
    enforce_eager: bool = Field(False, description="Disable CUDA graphs (`--enforce-eager`).")
    enable_prefix_caching: bool | None = Field(
        None, description="Prefix caching on/off. Default: vLLM's (on)."
    )
    speculative: Speculative | None = Field(
        None,
        description="Speculative decoding (`--speculative-config`; docs/spec.md"
        "#speculative-decoding).",
    )
    extra_args: tuple[str, ...] = Field((), description="Extra `vllm serve` arguments.")
    kubernetes: PodSettings | None = Field(
        None,
        description="Phase 1: settings of the serve pods over the `kubernetes` section's "
        "(maps merge, lists replace; docs/phase1-kubernetes.md).",
    )


class Spec(Section):
    """A pdctl deployment spec."""

    name: DnsLabel = Field(
        ...,
        description="Deployment name: a DNS-1123 label that starts with a letter, at most 50 "
        "characters; prefixes every object, process and file.",
    )
    phase: Literal[0, 1, 2, 3] = Field(
        0,
        description="0: processes on hosts; 1: Kubernetes workload; 2: prefill/decode "
        "disaggregation; 3: PD with HAMi-sliced decode.",
    )
    target: Literal["hosts", "kubernetes"] | None = Field(
        None,
        description="Where phases 2 and 3 run. Default: `hosts` for phase 0, `kubernetes` for "
        "phase 1; for phases 2 and 3 `hosts` when `hosts` is given, else `kubernetes` (phase 3 "
        "on hosts slices decode with HAMi-core alone: `decode.share.library`).",
    )
    model: Model
    engine: Engine = defaults()
    secrets: Secrets = defaults()
    hosts: tuple[Host, ...] = Field((), description="Hosts for bare-metal phases.")
    kubernetes: Kubernetes = defaults()
    serve: Serve | None = Field(None, description="Serving shape for phases 0 and 1.")
    prefill: Prefill | None = Field(None, description="Prefill instances (phases 2 and 3).")
    decode: Decode | None = Field(None, description="Decode instances (phases 2 and 3).")
    disaggregation: Disaggregation | None = Field(
        None, description="KV-transfer connector between prefill and decode (phases 2 and 3)."
    )
    router: Router = defaults(
        description="The request router (the 'conductor') in front of prefill and decode; "
        "in phase 0, when written, the one endpoint in front of the replicas.",
    )

    hardware: Hardware | None = Field(
        None, description="The GPUs the deployment runs on, for `pdctl plan`."
    )
    workload: Workload | None = Field(
        None, description="Expected traffic, for `pdctl plan` (P:D ratio, batch, advice)."
    )
    bench: Bench | None = Field(
        None, description="The load `pdctl bench` sends and the P/D canary (docs/bench.md)."
    )
    autoscaling: Autoscaling | None = Field(
        None, description="Per-role autoscaling on Kubernetes (docs/autoscaling.md)."
    )

    @property
    def disaggregated(self) -> bool:
        """Prefill and decode run apart (phases 2 and 3)."""
        return self.phase in (2, 3)

    @property
    def roles(self) -> tuple[str, ...]:
        """The engine roles: serve (phases 0, 1), or prefill and decode."""
        return ("prefill", "decode") if self.disaggregated else ("serve",)

    @field_validator("name")
    @classmethod
    def _object_name(cls, value: str) -> str:
        # It names Services (DNS-1035: a letter first, at most 63 with suffixes such as -epp).
        if not value[0].isalpha() or len(value) > NAME_MAX:
            raise ValueError(
                f"{value!r}: a deployment name starts with a letter and has at most {NAME_MAX} "
                "characters, since it names Kubernetes Services with suffixes (e.g. <name>-epp)"
            )
        return value

    @model_validator(mode="after")
    def _batching(self) -> "Spec":
        for role in self.roles:
            shape = getattr(self, role)
            if shape is not None:
                check_batching(role, shape, self.model.max_model_len, self.engine.extra_args)
        return self

    @model_validator(mode="after")
    def _section_mounts(self) -> "Spec":
        """The `kubernetes` section's volumeMounts, checked where they are written (the
        per-role checks of plan/kube_checks see them merged into each role)."""
        kube = self.phase == 1 or (
            self.disaggregated
            and (self.target == "kubernetes" or (self.target is None and not self.hosts))
        )
        if kube:
            shapes = [(n, getattr(self, n)) for n in self.roles]  # serve, or prefill and decode
            section_mounts(self.kubernetes, [(n, s.kubernetes if s else None) for n, s in shapes])
        return self

    @field_validator("hosts")
    @classmethod
    def _unique_hosts(cls, value: tuple[Host, ...]) -> tuple[Host, ...]:
        seen: set[str] = set()
        machines: dict[tuple[str, int], str] = {}
        for host in value:
            if host.name in seen:
                raise ValueError(f"host name {host.name!r} is used twice")
            seen.add(host.name)
            # Two entries for one machine would hand out its GPUs and ports twice.
            other = machines.setdefault((host.address.lower(), host.port), host.name)
            if other != host.name:
                raise ValueError(
                    f"hosts {other} and {host.name} are the same machine ({host.address} port "
                    f"{host.port}); list it once, with all the GPUs pdctl may use"
                )
        _unique_peer_addresses(value)
        return value


def _unique_peer_addresses(hosts: tuple[Host, ...]) -> None:
    """Peers (KV transfer, the router, a multi-node group) reach a host at addressForPeers, or
    its address: a peer address set for one host and used by another would send one host's
    traffic to the other. (Hosts sharing one SSH address on different ports, without
    addressForPeers, stay allowed: test rigs and port-forwarded machines.)"""
    seen: dict[str, tuple[int, Host]] = {}
    for i, host in enumerate(hosts):
        peer = (host.address_for_peers or host.address).lower()
        if peer not in seen:
            seen[peer] = (i, host)
            continue
        j, other = seen[peer]
        if host.address_for_peers is None and other.address_for_peers is None:
            continue
        k, named, by = (i, host, other) if host.address_for_peers else (j, other, host)
        raise SpecError(
            f"host {named.name}'s addressForPeers {named.address_for_peers} is also how peers "
            f"reach host {by.name}",
            path=f"hosts[{k}].addressForPeers",
            fix="give each host the address of its own interface (`ip -br addr` on it)",
        )
