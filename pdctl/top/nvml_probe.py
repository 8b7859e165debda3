"""GPU telemetry sampler that runs ON the GPU host (stdlib + nvidia-ml-py only, no pdctl).

pdctl sends this file's text over the SSH connection `up` uses and runs it with the host's
python3; it prints one JSON line per window:
  {"window_s": 1.0, "gpus": [{"index": 0, "name": ..., "gpm": true, "sm_util": ..,
   "sm_occupancy": .., "dram_bw_util": .., "tensor_util": .., "util_gpu": .., "util_memory": ..,
   "mem_used_mib": .., "mem_total_mib": .., "power_w": ..}], "errors": [...]}
GPM (Hopper and newer) gives SM, DRAM-bandwidth and tensor-pipe utilisation over the window;
where it is not supported only NVML's utilisation rates (gpu, memory) are given.
Usage: python3 nvml_probe.py [WINDOW_SECONDS] [COUNT]
"""

import json
import sys
import time

GPM_METRICS = {
    "sm_util": "NVML_GPM_METRIC_SM_UTIL",
    "sm_occupancy": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "dram_bw_util": "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "tensor_util": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
}


def _gpm_supported(nvml, handle):
    try:
        return bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except Exception:
        return False


def _gpm_values(nvml, first, second):
    get = nvml.c_nvmlGpmMetricsGet_t()
    get.version = nvml.NVML_GPM_METRICS_GET_VERSION
    get.numMetrics = len(GPM_METRICS)
    get.sample1 = first
    get.sample2 = second
    for i, name in enumerate(GPM_METRICS.values()):
        get.metrics[i].metricId = getattr(nvml, name)
    nvml.nvmlGpmMetricsGet(get)
    return {key: round(get.metrics[i].value, 1) for i, key in enumerate(GPM_METRICS)}


def _static(nvml, handle, index):
    row = {"index": index}
    name = nvml.nvmlDeviceGetName(handle)
    row["name"] = name.decode() if isinstance(name, bytes) else name
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    row["mem_used_mib"] = mem.used // 2**20
    row["mem_total_mib"] = mem.total // 2**20
    try:
        rates = nvml.nvmlDeviceGetUtilizationRates(handle)
        row["util_gpu"] = rates.gpu
        row["util_memory"] = rates.memory
    except Exception as exc:
        row["util_error"] = type(exc).__name__
    try:
        row["power_w"] = round(nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0, 1)
    except Exception:
        row["power_w"] = None
    return row


def window(nvml, handles, gpm, seconds):
    errors = []
    first = {}
    for i, h in enumerate(handles):
        if gpm[i]:
            try:
                sample = nvml.nvmlGpmSampleAlloc()
                nvml.nvmlGpmSampleGet(h, sample)
                first[i] = sample
            except Exception as exc:
                errors.append(f"gpu {i}: GPM sample: {type(exc).__name__}: {exc}")
    time.sleep(seconds)
    rows = []
    for i, h in enumerate(handles):
        row = _static(nvml, h, i)
        row["gpm"] = False
        if i in first:
            try:
                second = nvml.nvmlGpmSampleAlloc()
                nvml.nvmlGpmSampleGet(h, second)
                row.update(_gpm_values(nvml, first[i], second))
                row["gpm"] = True
                nvml.nvmlGpmSampleFree(second)
            except Exception as exc:
                errors.append(f"gpu {i}: GPM metrics: {type(exc).__name__}: {exc}")
            nvml.nvmlGpmSampleFree(first[i])
        rows.append(row)
    return {"window_s": seconds, "gpus": rows, "errors": errors}


def main(argv):
    seconds = float(argv[1]) if len(argv) > 1 else 1.0
    count = int(argv[2]) if len(argv) > 2 else 1
    try:
        import pynvml as nvml
    except ImportError:
        why = f"NVML: no pynvml for {sys.executable} (pip install nvidia-ml-py there)"
        print(json.dumps({"window_s": seconds, "gpus": [], "errors": [why]}))
        return 0
    try:
        nvml.nvmlInit()
    except Exception as exc:  # no driver, no GPU
        print(json.dumps({"window_s": seconds, "gpus": [], "errors": [f"NVML: {exc}"]}))
        return 0
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    gpm = [_gpm_supported(nvml, h) for h in handles]
    for _ in range(count):
        print(json.dumps(window(nvml, handles, gpm, seconds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
