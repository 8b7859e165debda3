"""Spec builders shared by the capacity tests."""

from __future__ import annotations


def serve_spec(model: str, length: int = 8192, *, gpus: int = 1, head: str = "",
               serve: str = "replicas: 1, tensorParallel: 1", tail: str = "") -> str:
    """A phase 0 spec of MODEL at maxModelLen LENGTH on one host, gpu-a, with GPUS GPUs: HEAD
    lines before hosts (hardware:, engine:, workload:), SERVE the serve section's fields and
    TAIL lines after it."""
    ids = ", ".join(str(i) for i in range(gpus))
    return (
        f"name: demo\nmodel: {{name: {model}, maxModelLen: {length}}}\n{head}hosts:\n"
        f"  - {{name: gpu-a, address: 192.0.2.10, gpus: [{ids}]}}\nserve: {{{serve}}}\n{tail}"
    )


def slices_spec(per_gpu: int = 2, length: int = 8192, kubernetes: str = "{namespace: llm}",
                head: str = 'engine: {version: "0.33.0"}\n') -> str:
    """A phase 3 spec of Qwen3-8B: one prefill and PER_GPU decode engines sharing an H200."""
    return (
        f"name: slices\nphase: 3\nmodel: {{name: Qwen/Qwen3-8B, maxModelLen: {length}}}\n{head}"
        f"prefill: {{replicas: 1, tensorParallel: 1}}\ndecode:\n  replicas: {per_gpu}\n"
        f"  tensorParallel: 1\n  share: {{perGpu: {per_gpu}, gpuType: H200}}\n"
        f"kubernetes: {kubernetes}\n"
    )
