"""Read GPUs through NVML (package nvidia-ml-py, imported here only) into the JSON shape of
fixtures/gpu/nvml.json. No driver is an answer ({"error": ...}), never an exception."""

from __future__ import annotations

import json
from typing import Any

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
    out: dict[str, Any] = {
        "driver": _safe(n.nvmlSystemGetDriverVersion),
        "cuda_driver": _safe(n.nvmlSystemGetCudaDriverVersion),
        "nvml": _safe(n.nvmlSystemGetNVMLVersion),
        "gpus": [],
    }
    handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
    for i, h in enumerate(handles):
        mem = n.nvmlDeviceGetMemoryInfo(h)
        pci = n.nvmlDeviceGetPciInfo(h)
        bus = pci.busId.decode() if isinstance(pci.busId, bytes) else pci.busId
        numa = getattr(n, "nvmlDeviceGetNumaNodeId", None)
        g: dict[str, Any] = {
            "index": i,
            "name": _safe(n.nvmlDeviceGetName, h),
            "uuid": _safe(n.nvmlDeviceGetUUID, h),
            "mem_total": mem.total,
            "mem_free": mem.free,
            "pci_bus_id": bus,
            "cc": _safe(n.nvmlDeviceGetCudaComputeCapability, h),
            "mig_mode": _safe(n.nvmlDeviceGetMigMode, h),
            "numa": _safe(numa, h) if numa else None,
            "nvlink": {},
            "p2p": {},
        }
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
                g["p2p"][str(j)] = {
                    "anc": _safe(n.nvmlDeviceGetTopologyCommonAncestor, h, h2),
                    "read": _safe(n.nvmlDeviceGetP2PStatus, h, h2, P2P_READ),
                    "write": _safe(n.nvmlDeviceGetP2PStatus, h, h2, P2P_WRITE),
                    "nvlink": _safe(n.nvmlDeviceGetP2PStatus, h, h2, P2P_NVLINK),
                }
        out["gpus"].append(g)
    return out
