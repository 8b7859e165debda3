"""Specs the benchmarks render, generated (never checked in): phase 0 serve replicas spread
over many hosts, and the plain-file kustomization that builds the same objects as a
rendered Kubernetes bundle."""

from __future__ import annotations

from pathlib import Path

import yaml

GPUS_PER_HOST = 8


def scale_spec(instances: int, runtime: str = "conda") -> dict:
    """A phase 0 spec with `instances` single-GPU serve replicas, 8 per host (so 1000
    instances take 125 hosts). Hosts alternate conda/docker/venv when runtime="mixed"."""
    hosts = []
    count = -(-instances // GPUS_PER_HOST)
    runtimes = ("conda", "docker", "venv")
    for i in range(count):
        gpus = min(GPUS_PER_HOST, instances - i * GPUS_PER_HOST)
        hosts.append(
            {
                "name": f"gpu-{i:04d}",
                "address": f"10.{i // 250}.{i % 250}.10",
                "user": "ubuntu",
                "gpus": list(range(gpus)),
                "runtime": runtimes[i % 3] if runtime == "mixed" else runtime,
            }
        )
    return {
        "name": f"scale-{instances}",
        "phase": 0,
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "maxModelLen": 8192},
        "engine": {"version": "0.33.0", "env": {"VLLM_LOGGING_LEVEL": "INFO"}},
        "secrets": {"hfToken": {"env": "HF_TOKEN"}},
        "hosts": hosts,
        "serve": {
            "replicas": instances,
            "tensorParallel": 1,
            "gpuMemoryUtilization": 0.9,
            "maxNumSeqs": 256,
            "port": 8000,
        },
    }


def write_spec(spec: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def write_kustomization(stream: str, folder: Path) -> Path:
    """Split a rendered YAML stream into one plain file per object plus a kustomization.yaml
    listing them, so `kubectl kustomize folder` builds the same objects."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i, obj in enumerate(d for d in yaml.safe_load_all(stream) if d):
        name = f"{i:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        (folder / name).write_text(yaml.safe_dump(obj, sort_keys=False), encoding="utf-8")
        names.append(name)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": names,
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization), encoding="utf-8")
    return folder


def main() -> None:
    """For reproducing a figure by hand (see docs/performance.md):
    `python benchmarks/specs.py scale N > spec.yaml` writes the N-instance spec;
    `pdctl render SPEC | python benchmarks/specs.py kustomization DIR` writes the plain files."""
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "scale":
        sys.stdout.write(yaml.safe_dump(scale_spec(int(sys.argv[2]), "mixed"), sort_keys=False))
    elif len(sys.argv) == 3 and sys.argv[1] == "kustomization":
        write_kustomization(sys.stdin.read(), Path(sys.argv[2]))
    else:
        sys.exit("usage: specs.py scale N | specs.py kustomization DIR")


if __name__ == "__main__":
    main()
