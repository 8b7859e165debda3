"""Extra environment and volumes of a role's pods (`env`, `envFrom`, `volumes`,
`volumeMounts` in `kubernetes` and the per-role overrides), in the Kubernetes shapes."""

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field, model_validator

from pdctl.spec.base import DnsLabel, EnvName, Section, matching
from pdctl.spec.value import SecretKey

SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# Volumes pdctl mounts itself.
RESERVED_VOLUMES = ("model-cache", "shm", "kube-api-access", "config")


def abs_path(value: str) -> str:
    if not value.startswith("/") or "\\" in value:
        raise ValueError(f"{value!r} must be an absolute path (starting with '/')")
    return value


AbsPath = Annotated[str, AfterValidator(abs_path)]


def one_of(obj: Section, fields: tuple[str, ...], what: str) -> None:
    given = [f for f in fields if getattr(obj, f) is not None]
    if len(given) != 1:
        names = ", ".join(type(obj).model_fields[f].alias or f for f in fields)
        raise ValueError(f"{what} takes exactly one of {names} (got {len(given)})")


class NameRef(Section):
    """A ConfigMap or Secret, by name."""

    name: Annotated[str, matching(
        SUBDOMAIN, "is not a Kubernetes object name: lower-case letters, digits, '-' and '.'", 253
    )] = Field(..., description="Object name.")
    optional: bool | None = Field(None, description="Start the pod even if it is missing.")


class KeyRef(NameRef):
    """One key of a ConfigMap or Secret."""

    key: SecretKey = Field(..., description="Key inside the object.")


class ValueFrom(Section):
    """Where an environment variable's value comes from."""

    config_map_key_ref: KeyRef | None = Field(None, description="A ConfigMap key.")
    secret_key_ref: KeyRef | None = Field(None, description="A Secret key.")

    @model_validator(mode="after")
    def _one(self) -> "ValueFrom":
        one_of(self, ("config_map_key_ref", "secret_key_ref"), "valueFrom")
        return self


class EnvVar(Section):
    """An environment variable from a ConfigMap or Secret key (plain values: `engine.env`)."""

    name: EnvName = Field(..., description="Variable name.")
    value_from: ValueFrom = Field(..., description="The key it comes from.")


class EnvFrom(Section):
    """Every key of a ConfigMap or Secret as environment variables."""

    config_map_ref: NameRef | None = Field(None, description="A ConfigMap.")
    secret_ref: NameRef | None = Field(None, description="A Secret.")
    prefix: EnvName | None = Field(None, description="Prefix for each variable name.")

    @model_validator(mode="after")
    def _one(self) -> "EnvFrom":
        one_of(self, ("config_map_ref", "secret_ref"), "envFrom")
        return self


class Volume(Section):
    """An extra pod volume: exactly one source."""

    name: DnsLabel = Field(..., description="Volume name (mounts refer to it).")
    config_map: dict[str, Any] | None = Field(None, description="`{name: ...}` of a ConfigMap.")
    secret: dict[str, Any] | None = Field(None, description="`{secretName: ...}` of a Secret.")
    empty_dir: dict[str, Any] | None = Field(None, description="`{medium, sizeLimit}`.")
    host_path: dict[str, Any] | None = Field(None, description="`{path, type}` on the node.")
    persistent_volume_claim: dict[str, Any] | None = Field(
        None, description="`{claimName, readOnly}` of an existing PVC."
    )
    nfs: dict[str, Any] | None = Field(None, description="`{server, path, readOnly}`.")
    image: dict[str, Any] | None = Field(
        None, description="`{reference, pullPolicy}`: an OCI image (Kubernetes >= 1.31)."
    )

    @model_validator(mode="after")
    def _one(self) -> "Volume":
        sources = (
            "config_map", "secret", "empty_dir", "host_path", "persistent_volume_claim", "nfs",
            "image",
        )
        one_of(self, sources, "a volume")
        if self.name in RESERVED_VOLUMES:
            raise ValueError(f"volume name {self.name!r} is pdctl's own; choose another name")
        return self


class VolumeMount(Section):
    """Where an extra volume is mounted in the engine container."""

    name: DnsLabel = Field(..., description="Name of a volume in `volumes`.")
    mount_path: AbsPath = Field(..., description="Absolute path in the container.")
    read_only: bool = Field(False, description="Mount read-only.")
    sub_path: str | None = Field(None, description="Path inside the volume to mount.")
