"""GPUs (inventory, driver, MIG, topology): the commands (`nvidia-smi` queries, `topo -m`,
`topo -p2p r|w`, `nvlink -s`, /proc/driver/nvidia/version), NVML read on this machine (package
nvidia-ml-py, imported in `dump` only, the one part here that does I/O; no driver is an
answer, {"error": ...}, never an exception), the parsers and the checks: GPUs present, driver
new enough, MIG mode, tensor-parallel groups on NVLink inside one NUMA node, P2P read/write
inside TP groups and between prefill/decode pairs on one host (NCCL transfer). Pure but `dump`.

The topology tables are tab-separated; the header may be wrapped in ANSI underline escapes;
GPU rows end with CPU affinity, NUMA affinity, an empty field and the GPU NUMA ID; NIC rows end
in empty fields; published dumps may be truncated (missing NIC rows)."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import permutations
from typing import Any

from pdctl.plan.model import Instance, Plan
from pdctl.plan.topology import best_group, describe, group_score
from pdctl.preflight.facts import Gpu, HostFacts, Missing, is_nvlink, version_tuple
from pdctl.preflight.finding import Finding, HostCheck, gpu_list
from pdctl.preflight.host import GATHER, command_failure, failure
from pdctl.spec.model import Host, Spec

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

FIELDS = "index,uuid,name,memory.total,memory.used,driver_version,pci.bus_id,mig.mode.current"
QUERY_COMMAND = (f"nvidia-smi --query-gpu={FIELDS},mig.mode.pending,compute_cap --format=csv"
                 f" || nvidia-smi --query-gpu={FIELDS} --format=csv")


def commands(spec: Spec, host: Host) -> dict[str, str]:
    """file name -> shell command, in the order they run (hosts whose engines use GPUs)."""
    if spec.engine.device == "cpu" or not host.gpus:
        return {}
    return {SMI: "nvidia-smi", QUERY: QUERY_COMMAND, TOPO: "nvidia-smi topo -m",
            P2P_R: "nvidia-smi topo -p2p r", P2P_W: "nvidia-smi topo -p2p w",
            NVLINK: "nvidia-smi nvlink -s", MIG_PROFILES: "nvidia-smi mig -lgip",
            PROC: "cat /proc/driver/nvidia/version"}


# nvmlGpuP2PCapsIndex_t values (nvml.h). Passed as plain ints: some binding versions define
# the constants as something ctypes cannot pass.
P2P_READ, P2P_WRITE, P2P_NVLINK = 0, 1, 2
MAX_LINKS = 18


def _safe(fn: Any, *args: Any) -> Any:
    try:
        value = fn(*args)
    except Exception as exc:  # record the failure as data
        return {"error": type(exc).__name__, "msg": str(exc)}
    return value.decode() if isinstance(value, bytes) else value


def dump() -> str:
    try:
        import pynvml as n
    except ImportError as exc:
        return json.dumps({"error": "ImportError", "msg": str(exc)})
    try:
        n.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return json.dumps({"error": type(exc).__name__, "msg": str(exc)})
    try:
        return json.dumps(_read(n), indent=1, default=str)
    finally:
        _safe(n.nvmlShutdown)


def _read(n: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"driver": _safe(n.nvmlSystemGetDriverVersion),
                           "cuda_driver": _safe(n.nvmlSystemGetCudaDriverVersion),
                           "nvml": _safe(n.nvmlSystemGetNVMLVersion), "gpus": []}
    handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
    for i, h in enumerate(handles):
        mem = n.nvmlDeviceGetMemoryInfo(h)
        pci = n.nvmlDeviceGetPciInfo(h)
        bus = pci.busId.decode() if isinstance(pci.busId, bytes) else pci.busId
        numa = getattr(n, "nvmlDeviceGetNumaNodeId", None)
        g: dict[str, Any] = {
            "index": i, "name": _safe(n.nvmlDeviceGetName, h),
            "uuid": _safe(n.nvmlDeviceGetUUID, h), "mem_total": mem.total, "mem_free": mem.free,
            "pci_bus_id": bus, "cc": _safe(n.nvmlDeviceGetCudaComputeCapability, h),
            "mig_mode": _safe(n.nvmlDeviceGetMigMode, h), "numa": _safe(numa, h) if numa else None,
            "nvlink": {}, "p2p": {}}
        if isinstance(g["cc"], tuple):
            g["cc"] = list(g["cc"])
        if isinstance(g["mig_mode"], tuple):
            g["mig_mode"] = list(g["mig_mode"])
        for link in range(MAX_LINKS):
            state = _safe(n.nvmlDeviceGetNvLinkState, h, link)
            if isinstance(state, dict):
                break
            g["nvlink"][str(link)] = state
        for j, h2 in enumerate(handles):
            if i != j:
                g["p2p"][str(j)] = {"anc": _safe(n.nvmlDeviceGetTopologyCommonAncestor, h, h2),
                                    "read": _safe(n.nvmlDeviceGetP2PStatus, h, h2, P2P_READ),
                                    "write": _safe(n.nvmlDeviceGetP2PStatus, h, h2, P2P_WRITE),
                                    "nvlink": _safe(n.nvmlDeviceGetP2PStatus, h, h2, P2P_NVLINK)}
        out["gpus"].append(g)
    return out


ANSI = re.compile(r"\x1b\[[0-9;]*m")
NUMBER = re.compile(r"-?\d+")
DRIVER = re.compile(r"\b(\d{3,}\.\d+(?:\.\d+)?)\b")

# NVML P2P status codes (nvml.h nvmlGpuP2PStatus_t) -> `nvidia-smi topo -p2p` legend.
P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "NS", 5: "NS", 6: "U"}
# nvmlDeviceGetTopologyCommonAncestor levels -> `topo -m` legend.
ANCESTOR = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def _mib(value: str) -> int:
    m = NUMBER.search(value)
    return int(m.group()) if m else 0


def _na(value: str) -> str:
    v = value.strip()
    return "" if v in ("[N/A]", "N/A", "[Not Supported]", "") else v


def parse_query_gpu(text: str) -> tuple[Gpu, ...]:
    """`nvidia-smi --query-gpu=index,uuid,name,memory.total,... --format=csv` (any column
    subset, header names with or without units)."""
    header, rows = _csv(text)
    gpus = []
    for row in rows:
        cell = dict(zip(header, (c.strip() for c in row), strict=False))
        if "index" not in cell or not cell["index"].isdigit():
            continue
        gpus.append(
            Gpu(index=int(cell["index"]), name=cell.get("name", ""), uuid=cell.get("uuid", ""),
                memory_mib=_mib(cell.get("memory.total", "")),
                memory_used_mib=_mib(cell.get("memory.used", "")),
                pci_bus_id=cell.get("pci.bus_id", ""),
                mig_mode=_na(cell.get("mig.mode.current", "")),
                mig_pending=_na(cell.get("mig.mode.pending", "")),
                compute_cap=_na(cell.get("compute_cap", ""))))
    return tuple(sorted(gpus, key=lambda g: g.index))


def _csv(text: str) -> tuple[list[str], list[list[str]]]:
    """The header (names without units) and the rows of a query-gpu CSV, blank rows left out."""
    rows = list(csv.reader(io.StringIO(strip_ansi(text)), skipinitialspace=True))
    rows = [r for r in rows if r and any(c.strip() for c in r)]
    return ([h.split("[")[0].strip() for h in rows[0]], rows[1:]) if rows else ([], [])


def query_driver(text: str) -> str:
    """The driver_version column of a query-gpu CSV ('' when absent)."""
    header, rows = _csv(text)
    if not rows or "driver_version" not in header:
        return ""
    i = header.index("driver_version")
    return rows[0][i].strip() if len(rows[0]) > i else ""


def parse_proc_version(text: str) -> str:
    """The kernel module version from /proc/driver/nvidia/version."""
    for line in text.splitlines():
        if line.startswith("NVRM"):
            m = DRIVER.search(line)
            if m:
                return m.group(1)
    return ""


def parse_smi_header(text: str) -> tuple[str, str]:
    """(driver, CUDA version) from the banner of plain `nvidia-smi`."""
    driver = re.search(r"Driver Version:\s*([\d.]+)", text)
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", text)
    return (driver.group(1) if driver else "", cuda.group(1) if cuda else "")


def _ok(value: object) -> bool:
    return not isinstance(value, dict)


def nvml_error(data: object) -> str:
    """A readable reason when an NVML dump holds an error instead of GPUs ('' otherwise)."""
    if not isinstance(data, dict) or "gpus" in data:
        return ""
    err = str(data.get("error", ""))
    msg = str(data.get("msg", ""))
    if "LibraryNotFound" in err:
        return "no NVIDIA driver: NVML library libnvidia-ml.so not found"
    if "DriverNotLoaded" in err:
        return "NVIDIA driver not loaded (NVML: Driver Not Loaded)"
    if "NoPermission" in err:
        return "no permission to use the NVIDIA driver (NVML: No Permission)"
    if err == "ImportError":
        return "package nvidia-ml-py is not installed (NVML not used)"
    return f"NVML failed: {err} {msg}".strip()


class NvmlDump:
    """The JSON an NVML probe writes (same shape as fixtures/gpu/nvml_dump.py)."""

    def __init__(self, text: str) -> None:
        self.data = json.loads(text)
        self.error = nvml_error(self.data)

    def driver(self) -> str:
        d = self.data.get("driver") if isinstance(self.data, dict) else None
        return d if isinstance(d, str) else ""

    def cuda(self) -> str:
        v = self.data.get("cuda_driver") if isinstance(self.data, dict) else None
        if isinstance(v, int):
            return f"{v // 1000}.{(v % 1000) // 10}"
        return ""

    def gpus(self) -> tuple[Gpu, ...]:
        out = []
        for g in self.data.get("gpus", []) if isinstance(self.data, dict) else []:
            mig = g.get("mig_mode")
            cc = g.get("cc")
            numa = g.get("numa")
            links = g.get("nvlink")
            out.append(Gpu(index=int(g["index"]),
                           name=str(g.get("name", "")) if _ok(g.get("name")) else "",
                           uuid=str(g.get("uuid", "")) if _ok(g.get("uuid")) else "",
                           memory_mib=int(g.get("mem_total", 0)) // (1024 * 1024),
                           memory_used_mib=(int(g.get("mem_total", 0)) - int(g.get("mem_free", 0)))
                           // (1024 * 1024),
                           pci_bus_id=str(g.get("pci_bus_id", "")), mig_mode=_mig(mig, 0),
                           mig_pending=_mig(mig, 1),
                           compute_cap=f"{cc[0]}.{cc[1]}" if isinstance(cc, list) else "",
                           numa=numa if isinstance(numa, int) else None,
                           nvlinks=sum(1 for v in links.values() if v == 1)
                           if isinstance(links, dict)
                           else None))
        return tuple(sorted(out, key=lambda g: g.index))

    def links(self) -> tuple[tuple[int, int, str], ...]:
        """Pairwise levels: NV<n> where NVML reports NVLink P2P OK, else the PCIe ancestor."""
        gpus = {g.index: g for g in self.gpus()}
        out = {}
        for g in self.data.get("gpus", []) if isinstance(self.data, dict) else []:
            a = int(g["index"])
            for key, p in (g.get("p2p") or {}).items():
                b = int(key)
                pair = (min(a, b), max(a, b))
                if pair in out or not isinstance(p, dict):
                    continue
                if p.get("nvlink") == 0:
                    n = min((gpus[i].nvlinks or 0) for i in pair if i in gpus) or 1
                    out[pair] = f"NV{n}"
                elif isinstance(p.get("anc"), int):
                    out[pair] = ANCESTOR.get(p["anc"], "SYS")
        return tuple((a, b, level) for (a, b), level in sorted(out.items()))

    def p2p(self, kind: str) -> tuple[tuple[int, int, str], ...]:
        key = "read" if kind == "r" else "write"
        out = []
        for g in self.data.get("gpus", []) if isinstance(self.data, dict) else []:
            a = int(g["index"])
            for b, p in sorted((g.get("p2p") or {}).items(), key=lambda kv: int(kv[0])):
                value = p.get(key) if isinstance(p, dict) else None
                if isinstance(value, int):
                    out.append((a, int(b), P2P_STATUS.get(value, "U")))
        return tuple(out)


def _mig(value: object, i: int) -> str:
    if isinstance(value, list) and len(value) > i:
        return "Enabled" if value[i] == 1 else "Disabled"
    return ""


def with_topology(gpus: tuple[Gpu, ...], numa: dict[int, int],
                  cpus: dict[int, str]) -> tuple[Gpu, ...]:
    """GPUs with NUMA node and CPU affinity from `topo -m` filled in where NVML had none."""
    return tuple(replace(g, numa=g.numa if g.numa is not None else numa.get(g.index),
                         cpu_affinity=g.cpu_affinity or cpus.get(g.index, ""))
                 for g in gpus)


def parse_smi_list(text: str) -> tuple[Gpu, ...]:
    """`nvidia-smi -L`: index, name and UUID of each GPU (MIG devices are skipped)."""
    out = []
    for line in strip_ansi(text).splitlines():
        m = re.match(r"^GPU (\d+): (.+?) \(UUID: ([^)]+)\)", line)
        if m:
            out.append(Gpu(index=int(m.group(1)), name=m.group(2), uuid=m.group(3)))
    return tuple(out)


def parse_smi_memory(text: str) -> dict[str, dict[str, int]]:
    """`nvidia-smi -q -d MEMORY`: FB memory (MiB) per PCI bus id: total, reserved, used, free."""
    out: dict[str, dict[str, int]] = {}
    bus = ""
    section = ""
    for line in strip_ansi(text).splitlines():
        m = re.match(r"^GPU ([0-9A-Fa-f:.]+)\s*$", line)
        if m:
            bus, section = m.group(1), ""
            out[bus] = {}
            continue
        if line.startswith("    ") and not line.startswith("        "):
            section = line.strip()
            continue
        kv = re.match(r"^\s+(\w+)\s+:\s+(\d+) MiB", line)
        if bus and section == "FB Memory Usage" and kv:
            out[bus][kv.group(1).lower()] = int(kv.group(2))
    return out


def parse_mig_profiles(text: str) -> tuple[tuple[int, str, int, int, float], ...]:
    """`nvidia-smi mig -lgip`: (gpu, profile name, profile id, total instances, memory GiB)."""
    out = []
    for line in strip_ansi(text).splitlines():
        m = re.match(r"^\|\s+(\d+)\s+MIG (\S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+)\s", line)
        if m:
            out.append((int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(5)),
                        float(m.group(6))))
    return tuple(out)


DEVICE = re.compile(r"^(GPU|NIC)(\d+)$")
LINK = re.compile(r"Link\s+(\d+):\s*(.*)$")


@dataclass(frozen=True)
class Matrix:
    """`topo -m`: GPU-to-GPU levels, per-GPU CPU/NUMA affinity, NIC names."""

    links: tuple[tuple[int, int, str], ...]
    numa: dict[int, int]
    cpus: dict[int, str]
    nics: tuple[str, ...]
    nic_links: tuple[tuple[int, str, str], ...]  # (gpu, nic name, level)


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    """Header cells and rows (cells stripped, empty fields kept) of the first table."""
    lines = strip_ansi(text).splitlines()
    header: list[str] | None = None
    rows: list[list[str]] = []
    for line in lines:
        if not line.strip():
            if header is not None:
                break
            continue
        if line.strip().startswith("Legend"):
            break
        cells = [c.strip() for c in line.split("\t")]
        if header is None:
            header = cells
        else:
            rows.append(cells)
    return header or [], rows


def parse_topo_matrix(text: str) -> Matrix:
    header, rows = _table(text)
    # Header: '', GPU0.., NIC0.., 'CPU Affinity', 'NUMA Affinity', 'GPU NUMA ID'
    columns = [c for c in header[1:] if c]
    devices = [c for c in columns if DEVICE.match(c)]
    nic_names = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)", strip_ansi(text), re.M))
    links: dict[tuple[int, int], str] = {}
    nic_links = []
    numa: dict[int, int] = {}
    cpus: dict[int, str] = {}
    for cells in rows:
        name = cells[0]
        m = DEVICE.match(name)
        if not m or m.group(1) != "GPU":
            continue
        a = int(m.group(2))
        values = cells[1 : 1 + len(devices)]
        for col, value in zip(devices, values, strict=False):
            cm = DEVICE.match(col)
            assert cm is not None
            if value in ("X", ""):
                continue
            if cm.group(1) == "GPU":
                b = int(cm.group(2))
                links.setdefault((min(a, b), max(a, b)), value)
            else:
                nic_links.append((a, nic_names.get(col, col), value))
        rest = cells[1 + len(devices) :]
        if rest:
            cpus[a] = rest[0]
        if len(rest) > 1 and rest[1].isdigit():
            numa[a] = int(rest[1])
    nics = tuple(nic_names.get(c, c) for c in devices if c.startswith("NIC"))
    return Matrix(
        links=tuple((a, b, lv) for (a, b), lv in sorted(links.items())), numa=numa, cpus=cpus,
        nics=nics, nic_links=tuple(nic_links))


def parse_p2p(text: str) -> tuple[tuple[int, int, str], ...]:
    """`nvidia-smi topo -p2p r` (or w): (a, b, status) for every ordered GPU pair."""
    header, rows = _table(text)
    columns = [c for c in header[1:] if c]
    out = []
    for cells in rows:
        m = DEVICE.match(cells[0])
        if not m:
            continue
        a = int(m.group(2))
        for col, value in zip(columns, cells[1 : 1 + len(columns)], strict=False):
            cm = DEVICE.match(col)
            if cm and value not in ("X", ""):
                out.append((a, int(cm.group(2)), value))
    return tuple(out)


def parse_nvlink(text: str) -> dict[int, int]:
    """`nvidia-smi nvlink -s`: active links per GPU (a link with a speed is active)."""
    counts: dict[int, int] = {}
    current: int | None = None
    for line in strip_ansi(text).splitlines():
        m = re.match(r"^GPU (\d+):", line)
        if m:
            current = int(m.group(1))
            counts[current] = 0
            continue
        lm = LINK.search(line)
        if lm and current is not None and re.search(r"\d\s*GB/s", lm.group(2)):
            counts[current] += 1
    return counts


def _gpu_error(raw: dict[str, str], nvml: NvmlDump | None) -> str:
    err = raw.get(QUERY + ".err", "")  # nvidia-smi tells more than a failed NVML when it ran
    if "couldn't communicate with the NVIDIA driver" in err:
        return "NVIDIA driver not loaded: nvidia-smi couldn't communicate with the driver"
    if nvml is not None and nvml.error and not raw.get(QUERY):
        return nvml.error
    if not err:
        return ""
    reason = command_failure(err)
    if reason.startswith("not installed"):
        return "no NVIDIA driver: nvidia-smi not found"
    return "nvidia-smi failed: " + reason


def _query_all(text: str) -> None:
    parse_query_gpu(text), query_driver(text)


def _nvml_all(text: str) -> None:
    dump = NvmlDump(text)
    if not dump.error:
        dump.gpus(), dump.driver(), dump.cuda(), dump.links(), dump.p2p("r"), dump.p2p("w")


# A parser per file, each run alone first: an output it cannot read is named, never raised.
PARSERS: dict[str, Callable[[str], object]] = {
    QUERY: _query_all,
    NVML: _nvml_all, SMI_L: parse_smi_list, SMI_MEMORY: parse_smi_memory, SMI: parse_smi_header,
    TOPO: parse_topo_matrix, P2P_R: parse_p2p, P2P_W: parse_p2p, NVLINK: parse_nvlink,
    PROC: parse_proc_version, MIG_PROFILES: parse_mig_profiles}


def fields(raw: dict[str, str]) -> tuple[dict[str, Any], list[Missing]]:
    """HostFacts fields of the GPUs (inventory, driver, CUDA, links, P2P, NICs on the PCIe tree,
    MIG profiles) from the outputs, and what is missing."""
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
            gpus = tuple(replace(g, numa=by_index[g.index].numa if g.index in by_index else None,
                                 nvlinks=by_index[g.index].nvlinks if g.index in by_index else None)
                         for g in gpus)
        driver = driver or nvml.driver()
        cuda = nvml.cuda()
        links, p2p_r, p2p_w = nvml.links(), nvml.p2p("r"), nvml.p2p("w")
    if gpus is None and raw.get(SMI_L):  # `nvidia-smi -L` (+ `-q -d MEMORY`) as a last resort
        gpus = parse_smi_list(raw[SMI_L])
        memory = list(parse_smi_memory(raw.get(SMI_MEMORY, "")).items())
        if len(memory) == len(gpus):
            gpus = tuple(replace(g, pci_bus_id=bus, memory_mib=m.get("total", 0),
                                 memory_used_mib=m.get("used", 0))
                         for g, (bus, m) in zip(gpus, memory, strict=True))
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
    return {
        "gpu_error": gpu_error, "driver": driver,
        "kernel_module": parse_proc_version(raw[PROC]) if raw.get(PROC) else "", "cuda": cuda,
        "gpus": gpus, "links": links, "p2p_read": p2p_r, "p2p_write": p2p_w, "nics": nics,
        "mig_profiles": tuple(
            sorted({name for _, name, _, _, _ in parse_mig_profiles(raw.get(MIG_PROFILES, ""))})),
    }, missing


def needed_gpus(instances: list[Instance]) -> tuple[int, ...]:
    return tuple(sorted({g for i in instances for g in i.gpus}))


def gpus(host: Host, hf: HostFacts, instances: list[Instance], index: int) -> list[Finding]:
    need = needed_gpus(instances)
    if hf.gpu_error:
        return [Finding("FAIL", "gpu.driver", host.name, hf.gpu_error,
                        f"NVIDIA GPUs {gpu_list(need)} with a working driver",
                        "install the NVIDIA driver (or set engine.device: cpu)")]
    if hf.gpus is None:
        return [Finding("WARN", "gpu.count", host.name, "GPU inventory: " + hf.why_missing("gpus"),
                        f"GPUs {gpu_list(need)}", "record query-gpu.csv or nvml.json")]
    present = {g.index for g in hf.gpus}
    lacking = [g for g in need if g not in present]
    names = sorted({g.name for g in hf.gpus})
    found = f"{len(hf.gpus)} GPUs (" + ", ".join(names) + ")" if hf.gpus else "no GPUs"
    if hf.gpus:
        found += f" indices {gpu_list(sorted(present))}"
    out = []
    if lacking:
        out.append(Finding("FAIL", "gpu.count", host.name, found,
                           f"GPUs {gpu_list(need)} (hosts[{index}].gpus)",
                           f"list only GPUs the host has in hosts[{index}].gpus"))
    else:
        out.append(Finding("PASS", "gpu.count", host.name, found, f"GPUs {gpu_list(need)}"))
    unused = [g for g in host.gpus if g not in present and g not in need]
    if unused and not lacking:
        out.append(Finding("WARN", "gpu.count", host.name, found,
                           f"every GPU in hosts[{index}].gpus present",
                           f"drop {gpu_list(unused)} from hosts[{index}].gpus"))
    busy = [g for g in hf.gpus if g.index in need and g.memory_mib
            and g.memory_used_mib > 0.05 * g.memory_mib]
    for g in busy:
        out.append(Finding("WARN", "gpu.busy", host.name,
                           f"GPU {g.index}: {g.memory_used_mib} MiB of {g.memory_mib} MiB in use",
                           "free GPUs (under 5% used)",
                           "stop what runs there (nvidia-smi shows it) or choose other GPUs"))
    return out


def driver(host: Host, hf: HostFacts, plan: Plan) -> list[Finding]:
    rel = plan.release
    want = f">= {rel.min_driver} (CUDA {rel.cuda_major}, vLLM {rel.version})"
    if hf.gpu_error:
        return []
    if not hf.driver:
        return [Finding("WARN", "gpu.driver", host.name, "driver version not gathered", want,
                        GATHER)]
    out = []
    if version_tuple(hf.driver) < version_tuple(rel.min_driver):
        out.append(Finding("FAIL", "gpu.driver", host.name, f"driver {hf.driver}", want,
                           "upgrade the NVIDIA driver, or pin an older engine.version"))
    else:
        cuda = f", CUDA {hf.cuda}" if hf.cuda else ""
        out.append(Finding("PASS", "gpu.driver", host.name, f"driver {hf.driver}{cuda}", want))
    if hf.kernel_module and hf.kernel_module != hf.driver:
        out.append(Finding("FAIL", "gpu.driver", host.name,
                           f"kernel module {hf.kernel_module}, user-space driver {hf.driver}",
                           "the same version", "reboot (or reload the nvidia modules)"))
    return out


def mig(host: Host, hf: HostFacts, instances: list[Instance]) -> list[Finding]:
    need = set(needed_gpus(instances))
    gpus = [g for g in hf.gpus or () if g.index in need]
    if not gpus:
        return []
    enabled = [g.index for g in gpus if g.mig_mode == "Enabled"]
    pending = [g.index for g in gpus if g.mig_pending and g.mig_pending != g.mig_mode]
    if enabled:
        return [Finding("FAIL", "gpu.mig", host.name, f"MIG enabled on GPUs {gpu_list(enabled)}",
                        "MIG disabled on whole GPUs the plan uses",
                        "nvidia-smi -i N -mig 0 (then reset the GPU), or choose other GPUs")]
    if pending:
        return [Finding("WARN", "gpu.mig", host.name,
                        f"MIG mode change pending on GPUs {gpu_list(pending)}",
                        "no pending MIG change", "reset the GPUs or reboot")]
    modes = sorted({g.mig_mode or "not supported" for g in gpus})
    return [Finding("PASS", "gpu.mig", host.name, "MIG " + "/".join(modes).lower(),
                    "MIG disabled (whole GPUs)")]


def _numa(hf: HostFacts, gpus: tuple[int, ...]) -> str:
    nodes = sorted({g.numa for g in (hf.gpu(i) for i in gpus) if g is not None
                    and g.numa is not None})
    return "NUMA " + ",".join(map(str, nodes)) if nodes else ""


def suggested(host: Host, hf: HostFacts, instances: list[Instance]) -> dict[str, tuple[int, ...]]:
    """GPU sets a topology-aware placement gives the host's instances, in plan order."""
    free = [g for g in host.gpus if hf.gpu(g) is not None]
    out: dict[str, tuple[int, ...]] = {}
    for inst in instances:
        used = [g for g in host.gpus if g not in free]
        best = best_group(hf, free, len(inst.gpus), used) if inst.gpus else None
        if best is None:
            break
        out[inst.name] = tuple(sorted(best))
        free = [g for g in free if g not in best]
    return out


def tp_links(host: Host, hf: HostFacts, inst: Instance, best: tuple[int, ...] | None,
             index: int) -> list[Finding]:
    gpus = inst.gpus
    if len(gpus) < 2 or hf.gpus is None:
        return []
    want = "NVLink (NV#) between all GPUs of the group, one NUMA node"
    where = f"{host.name}/{inst.name}"
    level = describe(hf, gpus)
    if not level:
        return [Finding("WARN", "tp.nvlink", where,
                        f"GPUs {gpu_list(gpus)}: link levels " + hf.why_missing("topo-m.txt"),
                        want, "record nvidia-smi topo -m")]
    numa = _numa(hf, gpus)
    found = f"GPUs {gpu_list(gpus)}: {level}" + (f", {numa}" if numa else "")
    better = best is not None and group_score(hf, best)[:3] < group_score(hf, gpus)[:3]
    if better and best is not None:
        best_numa = _numa(hf, best)
        return [Finding("WARN", "tp.nvlink", where, found, want,
                        f"use GPUs {gpu_list(best)} ({describe(hf, best)}"
                        + (f", {best_numa}" if best_numa else "")
                        + f"): pdctl render --facts DIR, or reorder hosts[{index}].gpus")]
    if is_nvlink(level):
        return [Finding("PASS", "tp.nvlink", where, found, want)]
    return [Finding("WARN", "tp.nvlink", where, found, want,
                    f"no NVLink-joined set of {len(gpus)} GPUs on this host: all-reduce goes "
                    "over PCIe; prefer fewer GPUs per instance (more replicas) if the model fits")]


def _p2p_pairs(hf: HostFacts, pairs: list[tuple[int, int]]) -> tuple[list[str], list[str]]:
    bad, unknown = [], []
    for a, b in pairs:
        for kind, label in (("r", "read"), ("w", "write")):
            status = hf.p2p(a, b, kind)
            if not status:
                unknown.append(f"{a}->{b} {label}")
            elif status != "OK":
                bad.append(f"{a}->{b} {label} {status}")
    return bad, unknown


def p2p(host: Host, hf: HostFacts, where: str, gpus_a: tuple[int, ...],
        gpus_b: tuple[int, ...] | None, what: str) -> list[Finding]:
    if hf.gpus is None:
        return []
    if gpus_b is None:
        pairs = list(permutations(gpus_a, 2))
        label = f"GPUs {gpu_list(gpus_a)}"
    else:
        pairs = [(a, b) for a in gpus_a for b in gpus_b if a != b]
        pairs += [(b, a) for a, b in pairs]
        label = f"GPUs {gpu_list(gpus_a)} <-> {gpu_list(gpus_b)}"
    if not pairs:
        return []
    want = f"P2P read and write OK ({what})"
    bad, unknown = _p2p_pairs(hf, pairs)
    if bad:
        return [Finding("WARN", "p2p", where, f"{label}: " + "; ".join(bad[:4]), want,
                        "NCCL falls back to host memory: check ACS/IOMMU settings in the BIOS "
                        "and kernel, or the GPU virtualisation")]
    if unknown:
        return [Finding("WARN", "p2p", where, f"{label}: P2P status "
                        + hf.why_missing("topo-p2p-r.txt", "topo-p2p-w.txt"), want,
                        "record nvidia-smi topo -p2p r and w")]
    return [Finding("PASS", "p2p", where, f"{label}: read OK, write OK", want)]


def host_topology(host: Host, hf: HostFacts, plan: Plan, instances: list[Instance],
                  index: int) -> list[Finding]:
    out: list[Finding] = []
    best = suggested(host, hf, instances)
    for inst in instances:
        out += tp_links(host, hf, inst, best.get(inst.name), index)
    for inst in instances:
        if len(inst.gpus) > 1:
            out += p2p(host, hf, f"{host.name}/{inst.name}", inst.gpus, None,
                       "tensor-parallel all-reduce")
    d = plan.spec.disaggregation
    if d is not None and d.connector == "p2p-nccl":
        prefill = [i for i in instances if i.role == "prefill"]
        decode = [i for i in instances if i.role == "decode"]
        for p, q in ((p, q) for p in prefill for q in decode):
            out += p2p(host, hf, f"{host.name}/{p.name}+{q.name}", p.gpus, q.gpus,
                       "P2pNccl KV transfer on one host")
    return out


def check_host(c: HostCheck) -> list[Finding]:
    """GPUs present, driver, MIG and topology, for hosts whose engines use GPUs."""
    if c.plan.spec.engine.device == "cpu" or not any(i.gpus for i in c.instances):
        return []
    out = gpus(c.host, c.facts, c.instances, c.index)
    out += driver(c.host, c.facts, c.plan)
    out += mig(c.host, c.facts, c.instances)
    if not c.facts.gpu_error:
        out += host_topology(c.host, c.facts, c.plan, c.instances, c.index)
    return out
