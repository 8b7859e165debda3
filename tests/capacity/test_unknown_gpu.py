"""A GPU pdctl does not know: planned with the memory the spec gives, refused with one line
naming hardware.gpuMemoryGib without it (plan, and validate --strict); the header credits
the field the GPU came from."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import cli, written

SPEC = """\
name: t
phase: 1
model: {{name: Qwen/Qwen3-8B}}
hardware:
{hardware}
engine: {{version: '0.23.0'}}
hosts:
  - {{name: a, address: 192.0.2.1, gpus: [0]}}
serve: {{replicas: 1}}
"""


def _spec(tmp_path: Path, hardware: str) -> str:
    return str(written(tmp_path / "s.yaml", SPEC.format(hardware=hardware)))


def test_an_unknown_gpu_with_its_memory_is_planned(tmp_path: Path) -> None:
    out, _ = cli(["plan", _spec(tmp_path, "  gpu: B300\n  gpuMemoryGib: 180")])
    first = out.splitlines()[0]
    assert "GPU B300 (180 GiB) (184,320 MiB" in first
    flat = " ".join(out.split())
    assert "speed figures borrowed from H100-SXM (extrapolated)" in flat


def test_an_unknown_gpu_without_memory_names_the_field(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "  gpu: B300")
    _, err = cli(["plan", spec], code=2)
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{spec}:5: hardware.gpu: unknown GPU type 'B300'" in err
    assert "hardware.gpuMemoryGib (or --gpu-memory-gib)" in err


def test_validate_strict_does_not_pass_an_unknown_gpu(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "  gpu: B300")
    _, err = cli(["validate", "--strict", spec], code=1)
    assert "hardware.gpu: unknown GPU type 'B300'" in err and "hardware.gpuMemoryGib" in err
    cli(["validate", "--strict", _spec(tmp_path, "  gpu: B300\n  gpuMemoryGib: 180")])


def test_the_header_credits_hardware_gpu_memory_gib(tmp_path: Path) -> None:
    out, _ = cli(["plan", _spec(tmp_path, "  gpuMemoryGib: 180")])
    first = " ".join(out.split("phase")[0].split())
    assert "; 180 GiB GPU (184,320 MiB" in first and "GPU 180 GiB GPU" not in first
    assert "hardware.gpuMemoryGib)" in first and "--gpu-memory-gib" not in first
    out, _ = cli(["plan", _spec(tmp_path, "  gpuMemoryGib: 180"), "--gpu-memory-gib", "90"])
    assert "90 GiB GPU (92,160 MiB" in out and "--gpu-memory-gib)" in " ".join(out.split())
