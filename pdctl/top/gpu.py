"""GPU telemetry: the host sampler's command and its output, dcgm-exporter's metrics (pure).

On hosts pdctl runs `nvml_probe.py` (this package) with the host's python3 over the SSH
connection `up` uses: NVML GPM metrics where the GPU supports them (Hopper and newer), else
NVML's utilisation rates. On Kubernetes it reads dcgm-exporter's DCGM_FI_PROF_* metrics when the
cluster runs it. NVML's "GPU utilization" and GPM's SM utilization read ~100% for a
bandwidth-bound and a compute-bound load alike (tests/fixtures/gpu/top-h200): DRAM-bandwidth and
tensor-pipe utilisation are what tell them apart."""

from __future__ import annotations

import base64
import json
import shlex
from dataclasses import dataclass
from importlib import resources
from typing import Any

from pdctl.top.metrics import Snapshot


@dataclass(frozen=True)
class GpuLoad:
    """One GPU over a window. Percentages 0-100; None where the source has no such figure."""

    host: str
    index: int
    name: str = ""
    source: str = "gpm"  # gpm | nvml | dcgm | missing
    sm_util: float | None = None
    sm_occupancy: float | None = None
    dram_bw_util: float | None = None
    tensor_util: float | None = None
    util_gpu: float | None = None
    util_memory: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    power_w: float | None = None
    roles: tuple[str, ...] = ()
    missing: str | None = None

    @property
    def bandwidth(self) -> float | None:
        """Memory-bandwidth utilisation: GPM/DCGM DRAM activity, else NVML's memory %."""
        return self.dram_bw_util if self.dram_bw_util is not None else self.util_memory


def probe_command(window_s: float, count: int = 1) -> str:
    """The shell command that samples every GPU of a host for `window_s` seconds."""
    text = resources.files("pdctl.top").joinpath("nvml_probe.py").read_text()
    code = base64.b64encode(text.encode()).decode()
    boot = f"import base64,sys;exec(base64.b64decode('{code}'))"
    return f"python3 -c {shlex.quote(boot)} {window_s:g} {int(count)}"


FIELDS = (
    "sm_util", "sm_occupancy", "dram_bw_util", "tensor_util", "util_gpu", "util_memory",
    "mem_used_mib", "mem_total_mib", "power_w",
)


def parse_probe(host: str, text: str) -> tuple[list[GpuLoad], list[str]]:
    """The probe's JSON lines -> one GpuLoad per index (averaged over the windows), errors."""
    rows: dict[int, list[dict]] = {}
    names: dict[int, str] = {}
    gpm: dict[int, bool] = {}
    errors: list[str] = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if not isinstance(doc, dict):
            continue
        errors.extend(str(e) for e in doc.get("errors", []))
        for g in doc.get("gpus", []):
            if isinstance(g, dict) and isinstance(g.get("index"), int):
                rows.setdefault(g["index"], []).append(g)
                names[g["index"]] = str(g.get("name", ""))
                gpm[g["index"]] = gpm.get(g["index"], True) and bool(g.get("gpm"))
    if not rows and not errors:
        errors.append("the GPU probe printed nothing (is python3 with nvidia-ml-py there?)")
    gpus = []
    for index in sorted(rows):
        values: dict[str, Any] = {k: _mean(r.get(k) for r in rows[index]) for k in FIELDS}
        gpus.append(GpuLoad(host, index, names[index], "gpm" if gpm[index] else "nvml", **values))
    return gpus, errors


def _mean(values) -> float | None:  # type: ignore[no-untyped-def]
    nums = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return round(sum(nums) / len(nums), 1) if nums else None


# dcgm-exporter field -> GpuLoad attribute and scale (PROF fields are ratios 0-1)
DCGM = {
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_util", 100.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy", 100.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_bw_util", 100.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_util", 100.0),
    "DCGM_FI_DEV_GPU_UTIL": ("util_gpu", 1.0), "DCGM_FI_DEV_MEM_COPY_UTIL": ("util_memory", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_mib", 1.0), "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
}


def parse_dcgm(snapshot: Snapshot) -> list[GpuLoad]:
    """dcgm-exporter's samples -> one GpuLoad per (Hostname, gpu) label pair."""
    acc: dict[tuple[str, int], dict[str, Any]] = {}
    names: dict[tuple[str, int], str] = {}
    for name, labels, value in snapshot.samples:
        if name not in DCGM:
            continue
        d = dict(labels)
        try:
            key = (d.get("Hostname", d.get("kubernetes_node", "")), int(d.get("gpu", "0")))
        except ValueError:
            continue
        attr, scale = DCGM[name]
        acc.setdefault(key, {})[attr] = round(value * scale, 1)
        names[key] = d.get("modelName", "")
    return [GpuLoad(h, i, names[(h, i)], "dcgm", **acc[(h, i)]) for h, i in sorted(acc)]


def kind(gpu: GpuLoad, t: dict[str, float]) -> str:
    """idle | bandwidth-bound | compute-bound | busy | unknown, by the THRESHOLDS `t`."""
    bw, tensor, sm = gpu.bandwidth, gpu.tensor_util, gpu.sm_util
    activity = sm if sm is not None else gpu.util_gpu
    if activity is None and bw is None:
        return "unknown"
    if (activity or 0) <= t["gpu_idle_max"] and (bw or 0) <= t["gpu_idle_max"]:
        return "idle"
    if tensor is not None and tensor >= t["compute_tensor_min"]:
        return "compute-bound"
    if bw is not None and bw >= t["bandwidth_bound_min"]:
        if tensor is None or tensor <= t["tensor_idle_max"]:
            return "bandwidth-bound"
    return "busy"
