"""HostFacts from the raw outputs of one host (a mapping file name -> text). Pure.

File names are those of a recording folder; a failed command is recorded as `<name>.err`
('exit N' and its stderr); an unreachable host as `ssh.err`."""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import replace

from pdctl.facts.gpu import (
    NvmlDump,
    parse_mig_profiles,
    parse_proc_version,
    parse_query_gpu,
    parse_smi_header,
    parse_smi_list,
    parse_smi_memory,
    query_driver,
    with_topology,
)
from pdctl.facts.topo import parse_nvlink, parse_p2p, parse_topo_matrix
from pdctl.facts.transfer import transfer_fields
from pdctl.preflight import host
from pdctl.preflight.facts import SSH, Gpu, HostFacts, Missing
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
    command_failure,
    failure,
    parse_conda,
    parse_df,
    parse_docker_info,
    parse_du,
    parse_ib_listing,
    parse_ib_ports,
    parse_libraries,
    parse_listening,
)

QUERY = "query-gpu.csv"
TOPO = "topo-m.txt"
P2P_R = "topo-p2p-r.txt"
P2P_W = "topo-p2p-w.txt"
NVLINK = "nvlink-s.txt"
PROC = "proc-driver-version.txt"
SMI = "nvidia-smi.txt"
SMI_L = "nvidia-smi-L.txt"
SMI_MEMORY = "q-memory-compute-clock.txt"
MIG_PROFILES = "mig-lgip.txt"
NVML = "nvml.json"

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


def _gpu_error(raw: dict[str, str], nvml: NvmlDump | None) -> str:
    if nvml is not None and nvml.error and not raw.get(QUERY):
        # NVML failed; nvidia-smi tells more when it ran.
        smi = raw.get(QUERY + ".err", "")
        if "couldn't communicate with the NVIDIA driver" in smi:
            return "NVIDIA driver not loaded: nvidia-smi couldn't communicate with the driver"
        return nvml.error
    err = raw.get(QUERY + ".err", "")
    if not err:
        return ""
    if "couldn't communicate with the NVIDIA driver" in err:
        return "NVIDIA driver not loaded: nvidia-smi couldn't communicate with the driver"
    reason = command_failure(err)
    if reason.startswith("not installed"):
        return "no NVIDIA driver: nvidia-smi not found"
    return "nvidia-smi failed: " + reason


# What a damaged output can raise in a parser (a replayed recording, a tool printing garbage).
PARSE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError,
                OverflowError, csv.Error)


def _nvml_all(text: str) -> None:
    dump = NvmlDump(text)
    if not dump.error:
        dump.gpus(), dump.driver(), dump.cuda(), dump.links(), dump.p2p("r"), dump.p2p("w")


PARSERS: dict[str, Callable[[str], object]] = {
    QUERY: lambda t: (parse_query_gpu(t), query_driver(t)),
    NVML: _nvml_all, SMI_L: parse_smi_list, SMI_MEMORY: parse_smi_memory, SMI: parse_smi_header,
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
    nvml = NvmlDump(raw[NVML]) if raw.get(NVML) else None
    gpus: tuple[Gpu, ...] | None = None
    driver = cuda = ""
    links: tuple[tuple[int, int, str], ...] = ()
    p2p_r: tuple[tuple[int, int, str], ...] = ()
    p2p_w: tuple[tuple[int, int, str], ...] = ()
    if raw.get(QUERY):
        gpus = parse_query_gpu(raw[QUERY])
        driver = query_driver(raw[QUERY])
    if nvml is not None and not nvml.error:
        from_nvml = nvml.gpus()
        if gpus is None:
            gpus = from_nvml
        else:  # NVML adds NUMA and NVLink counts the CSV lacks
            by_index = {g.index: g for g in from_nvml}
            gpus = tuple(
                replace(
                    g,
                    numa=by_index[g.index].numa if g.index in by_index else None,
                    nvlinks=by_index[g.index].nvlinks if g.index in by_index else None,
                )
                for g in gpus
            )
        driver = driver or nvml.driver()
        cuda = nvml.cuda()
        links, p2p_r, p2p_w = nvml.links(), nvml.p2p("r"), nvml.p2p("w")
    if gpus is None and raw.get(SMI_L):  # `nvidia-smi -L` (+ `-q -d MEMORY`) as a last resort
        gpus = parse_smi_list(raw[SMI_L])
        memory = list(parse_smi_memory(raw.get(SMI_MEMORY, "")).items())
        if len(memory) == len(gpus):
            gpus = tuple(
                replace(
                    g,
                    pci_bus_id=bus,
                    memory_mib=m.get("total", 0),
                    memory_used_mib=m.get("used", 0),
                )
                for g, (bus, m) in zip(gpus, memory, strict=True)
            )
    gpu_error = "" if gpus is not None else _gpu_error(raw, nvml)
    if gpus is None and not gpu_error:
        missing.append(Missing("gpus", "no GPU inventory recorded (query-gpu.csv or nvml.json)"))
    if raw.get(SMI):
        d, c = parse_smi_header(raw[SMI])
        driver, cuda = driver or d, cuda or c
    nics: tuple[str, ...] = ()
    if raw.get(TOPO):
        matrix = parse_topo_matrix(raw[TOPO])
        links = matrix.links or links
        nics = matrix.nics
        if gpus is not None:
            gpus = with_topology(gpus, matrix.numa, matrix.cpus)
    if raw.get(P2P_R):
        p2p_r = parse_p2p(raw[P2P_R])
    if raw.get(P2P_W):
        p2p_w = parse_p2p(raw[P2P_W])
    if raw.get(NVLINK) and gpus is not None:
        counts = parse_nvlink(raw[NVLINK])
        gpus = tuple(replace(g, nvlinks=counts.get(g.index, g.nvlinks)) for g in gpus)
    for n in (TOPO, P2P_R, P2P_W):
        if not raw.get(n) and gpus:
            missing.append(Missing(n, failure(raw, n) or "not gathered"))
    system, lacking = host.fields(raw)
    missing += lacking
    return HostFacts(
        name=name,
        gpu_error=gpu_error,
        driver=driver,
        kernel_module=parse_proc_version(raw[PROC]) if raw.get(PROC) else "",
        cuda=cuda,
        gpus=gpus,
        links=links,
        p2p_read=p2p_r,
        p2p_write=p2p_w,
        nics=nics,
        mig_profiles=tuple(
            sorted({name for _, name, _, _, _ in parse_mig_profiles(raw.get(MIG_PROFILES, ""))})
        ),
        hami=parse_hami_library(raw[HAMI_LIBRARY]) if raw.get(HAMI_LIBRARY) else None,
        **system,  # the host outside its GPUs
        **group_fields(raw),  # multi-node groups
        **transfer_fields(raw),  # network preflight
        missing=tuple(missing),
    )
