"""Parsers for GPU inventories: `nvidia-smi --query-gpu ... --format=csv`, NVML dumps and
/proc/driver/nvidia/version. Pure functions of the raw text."""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import replace

from pdctl.preflight.facts import Gpu

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
    rows = list(csv.reader(io.StringIO(strip_ansi(text)), skipinitialspace=True))
    rows = [r for r in rows if r and any(c.strip() for c in r)]
    if not rows:
        return ()
    header = [h.split("[")[0].strip() for h in rows[0]]
    gpus = []
    for row in rows[1:]:
        cell = dict(zip(header, (c.strip() for c in row), strict=False))
        if "index" not in cell or not cell["index"].isdigit():
            continue
        gpus.append(
            Gpu(
                index=int(cell["index"]),
                name=cell.get("name", ""),
                uuid=cell.get("uuid", ""),
                memory_mib=_mib(cell.get("memory.total", "")),
                memory_used_mib=_mib(cell.get("memory.used", "")),
                pci_bus_id=cell.get("pci.bus_id", ""),
                mig_mode=_na(cell.get("mig.mode.current", "")),
                mig_pending=_na(cell.get("mig.mode.pending", "")),
                compute_cap=_na(cell.get("compute_cap", "")),
            )
        )
    return tuple(sorted(gpus, key=lambda g: g.index))


def query_driver(text: str) -> str:
    """The driver_version column of a query-gpu CSV ('' when absent)."""
    rows = list(csv.reader(io.StringIO(strip_ansi(text)), skipinitialspace=True))
    if len(rows) < 2:
        return ""
    header = [h.split("[")[0].strip() for h in rows[0]]
    if "driver_version" not in header:
        return ""
    i = header.index("driver_version")
    return rows[1][i].strip() if len(rows[1]) > i else ""


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
            out.append(
                Gpu(
                    index=int(g["index"]),
                    name=str(g.get("name", "")) if _ok(g.get("name")) else "",
                    uuid=str(g.get("uuid", "")) if _ok(g.get("uuid")) else "",
                    memory_mib=int(g.get("mem_total", 0)) // (1024 * 1024),
                    memory_used_mib=(int(g.get("mem_total", 0)) - int(g.get("mem_free", 0)))
                    // (1024 * 1024),
                    pci_bus_id=str(g.get("pci_bus_id", "")),
                    mig_mode=_mig(mig, 0),
                    mig_pending=_mig(mig, 1),
                    compute_cap=f"{cc[0]}.{cc[1]}" if isinstance(cc, list) else "",
                    numa=numa if isinstance(numa, int) else None,
                    nvlinks=sum(1 for v in links.values() if v == 1)
                    if isinstance(links, dict)
                    else None,
                )
            )
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


def with_topology(gpus: tuple[Gpu, ...], numa: dict[int, int], cpus: dict[int, str]) -> tuple[
    Gpu, ...
]:
    """GPUs with NUMA node and CPU affinity from `topo -m` filled in where NVML had none."""
    return tuple(
        replace(
            g,
            numa=g.numa if g.numa is not None else numa.get(g.index),
            cpu_affinity=g.cpu_affinity or cpus.get(g.index, ""),
        )
        for g in gpus
    )


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
