"""The `kubernetes` section and the per-role pod settings (`serve.kubernetes`,
`prefill.kubernetes`, `decode.kubernetes`, `router.kubernetes`): scheduling, pod shape, model
source. A role's settings override the section's: maps merge, lists replace (`merged`)."""

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from pdctl.errors import SpecError
from pdctl.spec.base import DnsLabel, Quantity, Section, Size, defaults
from pdctl.spec.kube_affinity import Affinity, TopologySpread
from pdctl.spec.kube_env import AbsPath, EnvFrom, EnvVar, Volume, VolumeMount
from pdctl.spec.rdma import Rdma
from pdctl.spec.value import Address, Image, LabelKey, LabelValue, Registry

CACHE_MOUNT = "/root/.cache/huggingface"
IMAGE_MOUNT = "/models"
# Labels pdctl sets and selects on: a user value would break a Service, pool or rollout.
RESERVED_LABELS = (
    "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component",
    "app.kubernetes.io/part-of", "app.kubernetes.io/version", "app.kubernetes.io/managed-by",
    "pdctl.io/pool", "llm-d.ai/role", "llm-d.ai/engine-type",
)


class Toleration(Section):
    """A Kubernetes toleration."""

    key: LabelKey | None = Field(None, description="Taint key to tolerate (empty: every key).")
    operator: Literal["Exists", "Equal"] = Field(
        "Exists", description="Match on key only, or key and value."
    )
    value: LabelValue | None = Field(None, description="Taint value (operator Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect to tolerate (empty: all)."
    )
    toleration_seconds: int | None = Field(
        None, ge=0, description="With effect NoExecute: how long the pod stays after the taint."
    )

    @model_validator(mode="after")
    def _rules(self) -> "Toleration":
        # The API server's rules (core/v1 validation of tolerations).
        if self.operator == "Exists" and self.value:
            raise ValueError("operator Exists takes no `value`; use operator Equal, or drop it")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration without `key` needs operator Exists")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect NoExecute")
        return self


class Storage(Section):
    """Where the model comes from on Kubernetes (the `model-cache` volume)."""

    type: Literal["pvc", "emptyDir", "existingClaim", "hostPath", "nfs", "image"] = Field(
        "pvc",
        description="`pvc`: pdctl creates a PersistentVolumeClaim; `existingClaim`: use "
        "`claimName`; `emptyDir`: a scratch volume per pod (the model downloads at every "
        "start); `hostPath`: a folder on each node (`path`; a cache per node); `nfs`: an NFS "
        "export (`server`, `path`); `image`: an OCI image holding the weights (`reference`; "
        "Kubernetes >= 1.31, mounted read-only at `mountPath`, so `model.name` is a path "
        "inside it).",
    )
    size: Size = Field("100Gi", description="PVC size (or emptyDir size limit).")
    storage_class: str | None = Field(None, description="PVC storageClassName.")
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany"] = Field(
        "ReadWriteOnce",
        description="Access mode of the PVC (type `pvc`), or of the existing claim (type "
        "`existingClaim`). ReadWriteOnce mounts on one node only: more than one pod needs "
        "ReadWriteMany, a per-pod cache (emptyDir, hostPath) or a node pin.",
    )
    claim_name: DnsLabel | None = Field(
        None, description="Existing PVC name (type `existingClaim`)."
    )
    path: AbsPath | None = Field(
        None, description="Folder on the node (hostPath) or export (nfs)."
    )
    server: Address | None = Field(None, description="NFS server address (type `nfs`).")
    reference: Image | None = Field(
        None, description="Image holding the weights (type `image`), e.g. a registry path."
    )
    pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        None, description="Pull policy of the weights image (type `image`)."
    )
    mount_path: AbsPath | None = Field(
        None,
        description=f"Where the volume is mounted. Default: `{CACHE_MOUNT}` (the Hugging "
        f"Face cache), `{IMAGE_MOUNT}` for type `image`.",
    )

    @model_validator(mode="after")
    def _fields_of_type(self) -> "Storage":
        needs = {
            "existingClaim": ("claim_name",), "hostPath": ("path",), "nfs": ("server", "path"),
            "image": ("reference",),
        }
        for field in needs.get(self.type, ()):
            if getattr(self, field) is None:
                alias = type(self).model_fields[field].alias
                raise ValueError(f"type {self.type} needs `{alias}`")
        owners = {
            "claim_name": ("existingClaim",), "path": ("hostPath", "nfs"), "server": ("nfs",),
            "reference": ("image",), "pull_policy": ("image",),
        }
        for field, types in owners.items():
            if getattr(self, field) is not None and self.type not in types:
                alias = type(self).model_fields[field].alias
                raise ValueError(f"`{alias}` applies to type {' or '.join(types)} only")
        return self

    @property
    def mount(self) -> str:
        return self.mount_path or (IMAGE_MOUNT if self.type == "image" else CACHE_MOUNT)


class Limits(Section):
    """Limits that differ from the requests (a field left out: the request)."""

    cpu: Quantity | None = Field(None, description="CPU limit.")
    memory: Size | None = Field(None, description="Memory limit.")
    ephemeral_storage: Size | None = Field(None, description="Ephemeral-storage limit.")


class Resources(Section):
    """Requests per engine container; the limits equal them unless `limits` says otherwise.
    GPUs are pdctl's (tensorParallel, HAMi slices)."""

    cpu: Quantity = Field("8", description="CPU request.")
    memory: Size = Field("64Gi", description="Memory request.")
    ephemeral_storage: Size | None = Field(
        None, description="Ephemeral-storage request (container writable layer and logs)."
    )
    limits: Limits | None = Field(None, description="Limits that differ from the requests.")


def _no_reserved(value: dict[str, str]) -> dict[str, str]:
    taken = sorted(k for k in value if k in RESERVED_LABELS)
    if taken:
        raise ValueError(
            f"{taken[0]!r} is a label pdctl sets (and selects pods by); use another key"
        )
    return value


OwnLabels = Annotated[dict[LabelKey, LabelValue], AfterValidator(_no_reserved)]


class PodSettings(Section):
    """Scheduling and pod shape. In `kubernetes` for every engine pod; in `serve`, `prefill`,
    `decode` or `router` (the EPP) as `kubernetes:` for that role's pods, overriding the
    section's: maps (nodeSelector, labels, annotations, resources, affinity) merge key by
    key, lists (tolerations, volumes, env, ...) replace."""

    node_selector: dict[LabelKey, LabelValue] = Field({}, description="Node selector.")
    tolerations: tuple[Toleration, ...] = Field((), description="Tolerations.")
    affinity: Affinity | None = Field(None, description="Node and pod (anti-)affinity.")
    topology_spread_constraints: tuple[TopologySpread, ...] = Field(
        (), description="Topology spread constraints."
    )
    priority_class_name: DnsLabel | None = Field(None, description="PriorityClass name.")
    runtime_class_name: DnsLabel | None = Field(
        None, description="RuntimeClass name, e.g. `nvidia`."
    )
    labels: OwnLabels = Field(
        {}, description="Labels on every object (of the role) and its pods."
    )
    annotations: dict[LabelKey, str] = Field(
        {}, description="Annotations on every object (of the role) and its pods."
    )
    pod_labels: OwnLabels = Field({}, description="Labels on pods only.")
    pod_annotations: dict[LabelKey, str] = Field({}, description="Annotations on pods only.")
    service_account_name: DnsLabel | None = Field(
        None,
        description="ServiceAccount of the pods (serve and prefill; decode and the EPP run "
        "as the accounts pdctl renders for them).",
    )
    image_pull_secrets: tuple[DnsLabel, ...] = Field(
        (), description="Names of Secrets for pulling images."
    )
    resources: Resources = defaults(description="CPU, memory and ephemeral storage.")
    env_from: tuple[EnvFrom, ...] = Field(
        (), description="Environment from whole ConfigMaps or Secrets."
    )
    env: tuple[EnvVar, ...] = Field(
        (), description="Environment variables from ConfigMap or Secret keys (`valueFrom`)."
    )
    volumes: tuple[Volume, ...] = Field((), description="Extra volumes.")
    volume_mounts: tuple[VolumeMount, ...] = Field(
        (), description="Extra mounts in the engine container."
    )
    rdma: Rdma | None = Field(
        None,
        description="RDMA in the engine pods: the device plugin's resources and Multus "
        "networks that put HCAs in them, plus `IPC_LOCK`. Without it the pods get no RDMA, "
        "and pdctl refuses transports that need it (an RDMA-only `UCX_TLS`, DeepEP). A role "
        "writes `rdma: null` to go without the section's (docs/phase2-kubernetes.md#rdma).",
    )


class Kubernetes(PodSettings):
    """Kubernetes settings (phases 1-3). The pod settings apply to the engine pods (serve,
    prefill, decode); the EPP takes only the section's labels, annotations and
    imagePullSecrets, and `router.kubernetes`."""

    namespace: DnsLabel = Field("default", description="Namespace for every object.")
    create_namespace: bool = Field(False, description="Render the Namespace object too.")
    storage: Storage = defaults(description="Model source volume.")
    image_mirror: Registry | None = Field(
        None,
        description="A registry mirror (HOST[:PORT]) every image of the rendered objects is "
        "pulled from: its registry replaced, path, tag and digest kept "
        "(`vllm/vllm-openai:v0.33.0` -> `HOST[:PORT]/vllm/vllm-openai:v0.33.0`). For clusters "
        "with no way to the public registries; `pdctl bundle` writes the script that pushes "
        "the images there (docs/offline.md).",
    )
    shm_size: Size | None = Field(
        None,
        description="Size of the in-memory /dev/shm (NCCL needs it for tensor parallelism). "
        "Default: 2Gi, plus 4Gi per extra tensor-parallel rank.",
    )
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        "ClusterIP", description="Type of the Service in front of the engines."
    )
    startup_timeout_minutes: int = Field(
        30, ge=1, le=600, description="How long the startupProbe waits for the model to load."
    )
    network_policy: bool = Field(
        False,
        description="Phases 2 and 3 (llm-d): render NetworkPolicies for the engine pods and "
        "the endpoint picker (EPP). Decode pods take the routing sidecar's port 8000 only from "
        "the Gateway's proxy pods (`gatewayPodLabels`/`gatewayNamespace`) and the EPP (which "
        "scrapes metrics there); vLLM's 8200 is reached by the sidecar over localhost only. "
        "Engine pods of the deployment reach each other on every port (NIXL's side channel "
        "and UCX connections); the EPP's ext-proc port takes the Gateway's pods only. Needs a "
        "CNI that enforces NetworkPolicy. Phase 1 renders none.",
    )
    gateway_namespace: DnsLabel | None = Field(
        None,
        description="With `networkPolicy`: the namespace the Gateway's proxy pods run in "
        "(Envoy Gateway: `envoy-gateway-system`). Default: `namespace`, where Istio, kgateway "
        "and agentgateway run them beside the Gateway.",
    )
    gateway_pod_labels: dict[LabelKey, LabelValue] = Field(
        {},
        description="With `networkPolicy`: labels of the Gateway's proxy pods, the only pods "
        "that may send requests to the decode pods. Default: "
        "`gateway.networking.k8s.io/gateway-name: <router.gateway>`, the label Istio, "
        "kgateway and agentgateway put on them (Envoy Gateway: "
        "`gateway.envoyproxy.io/owning-gateway-name: <gateway>`).",
    )


# What the EPP takes from the section (its scheduling is router.kubernetes alone).
EPP_INHERITS = ("labels", "annotations", "pod_labels", "pod_annotations", "image_pull_secrets")
# model_construct, here and below: values already valid; validating would build validators
# outside the CLI's plugin-free load (pydantic then scans every package's entry points).
EPP_RESOURCES = Resources.model_construct(
    cpu="1", memory="1Gi", limits=Limits.model_construct(cpu="4", memory="4Gi")
)


def merged(base: Section, over: Section) -> Any:
    """`base` with the fields `over` sets: maps and sections merge key by key, the rest
    (lists, names, numbers) replace."""
    updates: dict[str, Any] = {}
    for field in over.model_fields_set:
        old, new = getattr(base, field, None), getattr(over, field)
        if isinstance(old, dict) and isinstance(new, dict):
            updates[field] = {**old, **new}
        elif isinstance(old, Section) and type(old) is type(new):
            updates[field] = merged(old, new)
        else:
            updates[field] = new
    return base.model_copy(update=updates)


def role_settings(k8s: Kubernetes, role: str, over: PodSettings | None) -> PodSettings:
    """The effective pod settings of a role: `serve`, `prefill`, `decode` or `epp`."""
    if role == "epp":
        inherited = {f: getattr(k8s, f) for f in EPP_INHERITS}
        base = PodSettings.model_construct(resources=EPP_RESOURCES, **inherited)
    else:
        base = PodSettings.model_construct(**{f: getattr(k8s, f) for f in PodSettings.model_fields})
    return base if over is None else merged(base, over)


def section_mounts(k8s: Kubernetes, roles: list[tuple[str, PodSettings | None]]) -> None:
    """SpecError for a `kubernetes.volumeMounts` entry that mounts over pdctl's own volumes
    (/dev/shm, the model cache) or names a volume missing from a role that inherits it (a
    role's own `volumes` replace the section's), located at the section, where it is written."""
    for i, mount in enumerate(k8s.volume_mounts):
        if mount.mount_path in ("/dev/shm", k8s.storage.mount):
            raise SpecError(
                f"volumeMounts[{i}]: {mount.mount_path} is where pdctl mounts its own volume",
                path="kubernetes.volumeMounts", fix="mount the volume somewhere else",
            )
        for role, over in roles:
            if over is not None and "volume_mounts" in over.model_fields_set:
                continue  # the role's own mounts replace the section's
            own = over is not None and "volumes" in over.model_fields_set
            volumes = over.volumes if over is not None and own else k8s.volumes
            if mount.name not in {v.name for v in volumes}:
                where = f" (the {role} pods' own volumes replace the section's)" if own else ""
                raise SpecError(
                    f"volumeMounts[{i}] names volume {mount.name!r}, which `volumes` lacks" + where,
                    path="kubernetes.volumeMounts",
                    fix="add the volume to `volumes` (of the section or the role)",
                )
