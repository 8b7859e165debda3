"""Facts about GPUs, hosts and clusters, and pure parsers of the raw outputs they come from."""

from pdctl.facts.host import host_facts
from pdctl.preflight.cluster import cluster_facts
from pdctl.preflight.facts import (
    CLUSTER,
    ClusterFacts,
    ClusterWorkload,
    Crd,
    Disk,
    Docker,
    Facts,
    Gpu,
    HamiDevice,
    HostFacts,
    Missing,
    Node,
    Port,
    is_nvlink,
    link_rank,
)

__all__ = [
    "ClusterFacts",
    "Crd",
    "Disk",
    "Docker",
    "Facts",
    "Gpu",
    "HamiDevice",
    "HostFacts",
    "Missing",
    "Node",
    "Port",
    "ClusterWorkload",
    "cluster_facts",
    "host_facts",
    "is_nvlink",
    "link_rank",
    "facts_from",
    "CLUSTER",
]

def facts_from(raw: dict[str, dict[str, str]]) -> Facts:
    """Facts from raw outputs per folder (host name, or `_kubernetes` for the cluster)."""
    hosts = tuple(host_facts(name, files) for name, files in sorted(raw.items()) if name != CLUSTER)
    cluster = cluster_facts(raw[CLUSTER]) if CLUSTER in raw else None
    return Facts(hosts=hosts, cluster=cluster)
