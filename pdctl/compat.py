"""The one compatibility table: what a pinned vLLM version has (flags, connectors, KV keys,
image, CUDA major, minimum driver). Pure; the flag lists ship inside the package."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

from pdctl.errors import SpecError

Version = tuple[int, int, int]

# Versions whose full `vllm serve` flag list ships in pdctl/data (dumped from the wheels).
FLAG_LISTS: tuple[Version, ...] = ((0, 23, 0), (0, 33, 0))

# KVTransferConfig fields (vllm/config/kv_transfer.py; extra="forbid" rejects anything else).
KV_KEYS_ALL = frozenset(
    {
        "kv_connector", "engine_id", "kv_buffer_device", "kv_role", "kv_port",
        "kv_connector_extra_config", "kv_connector_module_path", "enable_permute_local_kv",
        "kv_load_failure_policy",
    }
)
KV_KEYS_UNTIL_0_23 = frozenset({"kv_buffer_size", "kv_rank", "kv_parallel_size", "kv_ip"})

# Connector registry (vllm/distributed/kv_transfer/kv_connector/factory.py).
CONNECTORS_0_23 = frozenset(
    {
        "ExampleConnector", "ExampleHiddenStatesConnector", "P2pNcclConnector",
        "LMCacheConnectorV1", "LMCacheMPConnector", "NixlConnector", "MultiConnector",
        "MoRIIOConnector", "OffloadingConnector", "DecodeBenchConnector", "MooncakeConnector",
        "MooncakeStoreConnector", "FlexKVConnectorV1", "SimpleCPUOffloadConnector",
        "HF3FSKVConnector",
    }
)
CONNECTORS_0_33 = (CONNECTORS_0_23 - {"P2pNcclConnector"}) | {
    "NixlPullConnector", "NixlPushConnector", "HiSparseConnector",
}
P2P_NCCL_REMOVED: Version = (0, 24, 0)
# First release whose PyPI wheel is CUDA 13. Checked from PyPI metadata (`pip install --dry-run
# --no-deps --report`): vLLM 0.19.0 pins torch==2.10.0, whose wheel requires nvidia-*-cu12
# (CUDA 12.8); vLLM 0.20.0 pins torch==2.11.0, whose wheel requires nvidia-*-cu13. vLLM
# 0.22.0+ also requires nvidia-cutlass-dsl[cu13].
CUDA13_FROM: Version = (0, 20, 0)
# Minimum Linux driver per CUDA major (NVIDIA CUDA release notes: 13.0 -> R580, 12.9 -> R575).
MIN_DRIVER = {12: "575.51.03", 13: "580.65.06"}
# Mooncake's transfer-engine wheel must match the engine's CUDA major (a mismatch fails with
# `libcudart.so.<major>: cannot open shared object file`); `non-cuda` for CPU engines.
MOONCAKE_VERSION = "0.3.13.post1"  # the newest version published in all three variants
MOONCAKE_PACKAGE = {
    12: "mooncake-transfer-engine", 13: "mooncake-transfer-engine-cuda13",
    0: "mooncake-transfer-engine-non-cuda",
}
# NIXL for pip/conda engines (the vllm/vllm-openai images ship it already).
NIXL_PIP = "nixl==1.5.1"
# The request router on bare metal ("conductor"): PyPI `vllm-router`, flags checked against
# its 0.1.17 `--help` (tests/render/data/vllm_router_help.txt).
ROUTER_VERSION = "0.1.17"


@dataclass(frozen=True)
class LlmdPins:
    """The llm-d version set pdctl renders for Kubernetes (phases 2 and 3), pinned together.

    llm-d-router v0.10.0 (2026-08-17) is the first release under the new image names; its release
    publishes both images with the release tag. Checked in that tag (the extracted facts are
    in tests/render/data/llmd_v0.10.0.json): the sidecar's `--model-server-port` (`--vllm-port` is
    only its deprecated alias there), `--kv-connector=nixlv2` and `--secure-proxy`; the EPP's
    `--pool-*`, `--config-file`, port and `--metrics-endpoint-auth` flags; `llm-d.ai/v1alpha1`
    EndpointPickerConfig; every plugin type pdctl names (the approx-prefix-cache-producer that
    prefix-cache-scorer consumes is auto-created); gRPC health services `liveness` and
    `readiness`; disagg-profile-handler setting the prefill header itself (no separate headers
    handler); the chart's EPP Service `appProtocol: kubernetes.io/h2c` and its RBAC; the
    sidecar's `--enable-ssrf-protection` with `--inference-pool ns/name` and `--pool-group`
    (an allow-list of the pool's pod IPs and names, built by listing and watching the
    InferencePool and its pods: pkg/sidecar/proxy/allowlist.go); the EPP's metrics auth
    (TokenReview + SubjectAccessReview, a ClusterRole: config/charts/routerlib/templates/
    _rbac.yaml); both images run as user 65532.
    """

    version: str = "v0.10.0"
    sidecar_image: str = "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.10.0"
    epp_image: str = "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0"
    sidecar_connector: str = "nixlv2"
    epp_config_api: str = "llm-d.ai/v1alpha1"
    pool_group: str = "inference.networking.k8s.io"
    pool_api: str = "inference.networking.k8s.io/v1"
    prefill_role: str = "kv_producer"
    decode_role: str = "kv_both"
    epp_grpc_port: int = 9002
    epp_health_port: int = 9003
    epp_metrics_port: int = 9090


LLMD = LlmdPins()


def parse_version(text: str) -> Version:
    major, minor, patch = (int(p) for p in text.split("."))
    return (major, minor, patch)


@dataclass(frozen=True)
class Release:
    """What one pinned vLLM version offers."""

    version: str
    image: str
    pip: str
    cuda_major: int
    min_driver: str
    connectors: frozenset[str]
    kv_keys: frozenset[str]
    flags: frozenset[str]
    flags_from: str

    def mooncake_pip(self, device: str = "cuda") -> str:
        """The mooncake-transfer-engine wheel matching this release's CUDA major."""
        package = MOONCAKE_PACKAGE[0 if device == "cpu" else self.cuda_major]
        return f"{package}=={MOONCAKE_VERSION}"

    def has_kv_key(self, key: str) -> bool:
        return key in self.kv_keys

    def has_flag(self, flag: str) -> bool:
        name = flag.split("=", 1)[0].replace("_", "-")
        return name in self.flags

    def require_connector(self, connector: str, path: str = "disaggregation.connector") -> None:
        if connector in self.connectors:
            return
        if connector == "P2pNcclConnector":
            raise SpecError(
                "P2pNcclConnector was removed in vLLM 0.24.0", path=path,
                fix="pin engine.version <= 0.23.0 or use connector nixl or mooncake",
            )
        raise SpecError(
            f"vLLM {self.version} has no KV connector {connector}", path=path,
            fix="choose one of " + ", ".join(sorted(self.connectors)),
        )


@cache
def _flag_list(version: Version) -> frozenset[str]:
    name = "vllm_flags_{}.{}.{}.txt".format(*version)
    text = resources.files("pdctl").joinpath("data").joinpath(name).read_text()
    return frozenset(line.strip() for line in text.splitlines() if line.startswith("--"))


@cache
def release(version: str) -> Release:
    """The compatibility facts for a vLLM version X.Y.Z."""
    v = parse_version(version)
    # The nearest dumped flag list at or below v (the oldest list for older versions).
    known = [k for k in FLAG_LISTS if k <= v] or [FLAG_LISTS[0]]
    flags_from = max(known)
    old = v < P2P_NCCL_REMOVED
    cuda13 = v >= CUDA13_FROM
    return Release(
        version=version, image=f"vllm/vllm-openai:v{version}", pip=f"vllm=={version}",
        cuda_major=13 if cuda13 else 12,
        # CUDA 13.0 needs R580 (>= 580.65.06); CUDA 12.9 builds need >= 575.51.03.
        min_driver=MIN_DRIVER[13 if cuda13 else 12],
        connectors=CONNECTORS_0_23 if old else CONNECTORS_0_33,
        kv_keys=KV_KEYS_ALL | KV_KEYS_UNTIL_0_23 if old else KV_KEYS_ALL,
        flags=_flag_list(flags_from), flags_from="{}.{}.{}".format(*flags_from),
    )
