"""HostFacts from the raw outputs of one host (a mapping file name -> text). Pure.

File names are those of a recording folder; a failed command is recorded as `<name>.err`
('exit N' and its stderr); an unreachable host as `ssh.err`."""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import replace

from pdctl.preflight import gpu as gpus
from pdctl.preflight import host
from pdctl.preflight.facts import SSH, HostFacts, Missing
from pdctl.preflight.gpu import (
    MIG_PROFILES,
    NVLINK,
    NVML,
    P2P_R,
    P2P_W,
    PROC,
    QUERY,
    SMI,
    SMI_L,
    SMI_MEMORY,
    TOPO,
    parse_mig_profiles,
    parse_nvlink,
    parse_p2p,
    parse_proc_version,
    parse_query_gpu,
    parse_smi_header,
    parse_smi_list,
    parse_smi_memory,
    parse_topo_matrix,
    query_driver,
)
from pdctl.preflight.group import LISTEN, MEMLOCK, REACH, VLLM_VERSION, group_fields
from pdctl.preflight.hami import HAMI_LIBRARY, parse_hami_library
from pdctl.preflight.host import (
    CACHE,
    CONDA,
    DOCKER,
    HOSTNAME,
    IB,
    IB_PORTS,
    LIBS,
    MODEL,
    PORTS,
    SHM,
    SUPERVISE,
    VENV,
    parse_conda,
    parse_df,
    parse_docker_info,
    parse_du,
    parse_ib_listing,
    parse_ib_ports,
    parse_libraries,
    parse_listening,
)
from pdctl.preflight.transfer import transfer_fields

KNOWN = (
    SMI_L,
    SMI_MEMORY,
    MIG_PROFILES,
    QUERY,
    TOPO,
    P2P_R,
    P2P_W,
    NVLINK,
    PROC,
    SMI,
    NVML,
    IB,
    IB_PORTS,
    SHM,
    CACHE,
    MODEL,
    DOCKER,
    CONDA,
    PORTS,
    HOSTNAME,
    VENV,
    SUPERVISE,
    LIBS,
    VLLM_VERSION,
    MEMLOCK,
    REACH,
    LISTEN,
)


# What a damaged output can raise in a parser (a replayed recording, a tool printing garbage).
PARSE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError,
                OverflowError, csv.Error)


PARSERS: dict[str, Callable[[str], object]] = {
    QUERY: lambda t: (parse_query_gpu(t), query_driver(t)),
    NVML: gpus.nvml_all, SMI_L: parse_smi_list, SMI_MEMORY: parse_smi_memory, SMI: parse_smi_header,
    TOPO: parse_topo_matrix, P2P_R: parse_p2p, P2P_W: parse_p2p, NVLINK: parse_nvlink,
    IB: parse_ib_listing, IB_PORTS: parse_ib_ports, DOCKER: parse_docker_info,
    CONDA: parse_conda, LIBS: parse_libraries, PROC: parse_proc_version, SHM: parse_df,
    CACHE: parse_df, MODEL: parse_du, PORTS: parse_listening, MIG_PROFILES: parse_mig_profiles,
}


def host_facts(name: str, raw: dict[str, str]) -> HostFacts:
    """Everything `raw` tells about host `name`; absent facts stay None with a reason. An output
    its parser cannot read is left out and named in `missing`, never an exception."""
    if SSH in raw:
        return HostFacts(name=name, error=raw[SSH].strip() or "unreachable")
    unreadable = []
    for file, parse in PARSERS.items():
        if raw.get(file):
            try:
                parse(raw[file])
            except PARSE_ERRORS as exc:
                unreadable.append(Missing(file, f"unreadable output ({type(exc).__name__})"))
    if unreadable:
        raw = {k: v for k, v in raw.items() if k not in {m.name for m in unreadable}}
    try:
        facts = _host_facts(name, raw)
    except PARSE_ERRORS as exc:  # the outputs parse one by one but do not fit together
        return HostFacts(name=name, error=f"recorded outputs do not fit together ({exc!r:.200})")
    return replace(facts, missing=facts.missing + tuple(unreadable)) if unreadable else facts


def _host_facts(name: str, raw: dict[str, str]) -> HostFacts:
    missing: list[Missing] = []
    gpu, lacking = gpus.fields(raw)
    missing += lacking
    system, lacking = host.fields(raw)
    missing += lacking
    return HostFacts(
        name=name,
        **gpu,  # GPUs, driver, topology
        hami=parse_hami_library(raw[HAMI_LIBRARY]) if raw.get(HAMI_LIBRARY) else None,
        **system,  # the host outside its GPUs
        **group_fields(raw),  # multi-node groups
        **transfer_fields(raw),  # network preflight
        missing=tuple(missing),
    )
