"""RDMA in the engine pods on Kubernetes (`kubernetes.rdma`, or a role's `kubernetes.rdma`):
what makes the HCAs appear in a pod differs per cluster (a device plugin's extended resource,
SR-IOV networks attached through Multus), so the spec names it. On hosts the same concept is
`hosts[].rdmaDevices`. docs/phase2-kubernetes.md#rdma has the table per connector."""

import re
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from pdctl.spec.base import Section
from pdctl.spec.value import label_key

RDMA_DEVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # an HCA name, e.g. mlx5_0
# Multus: [namespace/]name[@interface] of a NetworkAttachmentDefinition.
NETWORK = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?(@[A-Za-z0-9_.-]{1,15})?"
)
# Resources pdctl sets itself (GPUs, HAMi slices) or that are not extended resources.
OWN_RESOURCES = ("cpu", "memory", "ephemeral-storage", "hugepages-")
OWN_PREFIXES = ("nvidia.com/gpu",)
MULTUS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"


def resource_name(value: str) -> str:
    """An extended resource a device plugin advertises: `domain/name` (rdma/ib,
    rdma/hca_shared_devices_a, nvidia.com/hostdev, openshift.io/mlnx_sriov_rdma)."""
    if "/" not in value:
        raise ValueError(
            f"{value!r} is not an extended resource name: write the device plugin's "
            "domain/name (e.g. rdma/ib)"
        )
    label_key(value)
    if value.startswith(OWN_PREFIXES) or value.startswith(OWN_RESOURCES):
        raise ValueError(f"{value!r} is a resource pdctl sets itself (GPUs, HAMi slices)")
    return value


def rdma_device(value: str) -> str:
    if not RDMA_DEVICE.fullmatch(value):
        raise ValueError(f"{value!r} is not an RDMA device name (e.g. mlx5_0; `ibv_devices`)")
    return value


def network(value: str) -> str:
    if not NETWORK.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a NetworkAttachmentDefinition: write [namespace/]name"
            "[@interface] (e.g. sriov-ib0 or net-ns/rdma-net@net1)"
        )
    return value


ResourceName = Annotated[str, AfterValidator(resource_name)]
RdmaDevice = Annotated[str, AfterValidator(rdma_device)]
Network = Annotated[str, AfterValidator(network)]


class Rdma(Section):
    """RDMA for a role's engine pods, and with it `IPC_LOCK` for vLLM (Pod Security: privileged).

    Verbs pin memory beyond RLIMIT_MEMLOCK, which only the capability allows (docs/security.md).
    """

    resources: dict[ResourceName, int] = Field(
        {},
        description="Extended resources per engine pod that put RDMA devices in it, from your "
        "cluster's device plugin (requested and limited at the count given): `rdma/ib` or "
        "`rdma/hca_shared_devices_a` (k8s-rdma-shared-dev-plugin, NVIDIA Network Operator), "
        "`nvidia.com/hostdev` (host-device networks), an SR-IOV resource such as "
        "`openshift.io/mlnx_sriov_rdma`.",
    )
    networks: tuple[Network, ...] = Field(
        (),
        description="Multus NetworkAttachmentDefinitions attached to the pods "
        "(`[namespace/]name[@interface]`, the `k8s.v1.cni.cncf.io/networks` annotation): "
        "SR-IOV or macvlan RDMA networks.",
    )
    devices: tuple[RdmaDevice, ...] = Field(
        (),
        description="The HCA names the pods see (e.g. `mlx5_0`), when you know them: "
        "exported as `NCCL_IB_HCA` (NCCL) and, for expert-parallel roles, `NVSHMEM_HCA_LIST` "
        "(`mlx5_0:1`, DeepEP's NVSHMEM). UCX (NIXL) picks them itself; pin it with "
        "`UCX_NET_DEVICES` in `engine.env`. Default: the libraries use every HCA the pod sees.",
    )

    @model_validator(mode="after")
    def _some_device(self) -> "Rdma":
        if not self.resources and not self.networks:
            raise ValueError(
                "rdma puts no RDMA device in the pods: name the device plugin's resource "
                "(e.g. resources: {rdma/ib: 1}) or a Multus network (networks: [...])"
            )
        if any(n < 1 or n > 64 for n in self.resources.values()):
            raise ValueError("each RDMA resource count is 1..64 per pod")
        return self
