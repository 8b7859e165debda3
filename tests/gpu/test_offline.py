"""tests/gpu/offline.py, which makes the GPU harness's bundle (tests/gpu/bundle.sh) with pdctl's
own offline feature: the recording it writes from tests/gpu/image-packages.txt is read by
`pdctl bundle --facts --skip-installed` as a real one is (torch 2.11.0 and the CUDA wheels at
the image's versions are left out; vLLM, NIXL and what the image has at another version
stay), and the layout puts every file in exactly one device call of at most the limit."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import yaml

from pdctl.cli.bundle_cmd import installed, recorded
from pdctl.offline.download import skip_installed
from pdctl.offline.need import needs
from pdctl.plan import make_plan
from pdctl.spec import load_text
from tests.gpu import offline
from tests.targets.testbed import pdctl

HERE = Path(__file__).parent
H100 = HERE.parents[1] / "tests/fixtures/gpu/vllm023-h100-h"
TORCH = "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl"
TOOLKIT = "cuda_toolkit-13.0.2-py2.py3-none-any.whl"
CUBLAS = "nvidia_cublas-13.1.0.3-py3-none-manylinux_2_27_x86_64.whl"
TRITON = "triton-3.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
KEPT = ("vllm-0.23.0-cp38-abi3-manylinux_2_31_x86_64.whl", "nixl-1.5.1-py3-none-any.whl",
        "nixl_cu13-1.5.1-cp312-cp312-manylinux_2_28_x86_64.whl",
        "numpy-2.3.5-cp312-cp312-manylinux_2_27_x86_64.whl",  # the image has 2.5.2
        "nvidia_cudnn_frontend-1.16.0-cp312-cp312-manylinux_2_28_x86_64.whl",  # not the image's
        "nvidia_npp-13.0.1.2-py3-none-manylinux_2_27_x86_64.whl",  # an extra torch does not ask
        "nvidia_cufft-12.0.0.60-py3-none-manylinux_2_27_x86_64.whl")  # not the version pinned
# (the image has cuFFT 12.0.0.61, which meets the pin: with the image's versions it goes)


def wheel(folder: Path, name: str, requires: tuple[str, ...] = ()) -> Path:
    dist, version = name.split("-")[:2]
    path = folder / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{dist}-{version}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    return path


@pytest.fixture
def closure(tmp_path: Path) -> Path:
    """A bundle's wheels/ as `pdctl bundle` resolves vLLM 0.23.0 (stand-ins: METADATA only)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel(wheels, TORCH, ("cuda-toolkit[cublas,cudart]==13.0.2; platform_system == \"Linux\"",
                          "triton==3.6.0; platform_system == \"Linux\"", "filelock",
                          "nvidia-nccl-cu13==2.28.9; extra == \"nccl\"", "sympy>=1.13.3"))
    # the version through cuda-toolkit's extra (V.*); npp's extra is not asked for
    wheel(wheels, TOOLKIT, (
        "nvidia-cublas==13.1.0.3.*; (sys_platform == 'linux') and extra == 'cublas'",
        "nvidia-npp==13.0.1.2.*; (sys_platform == 'linux') and extra == 'all'",
        "nvidia-cufft==12.0.0.61.*; (sys_platform == 'linux') and extra == 'cufft'"))
    for name in (CUBLAS, TRITON, *KEPT):
        wheel(wheels, name)
    return wheels


def plan_of(tmp_path: Path):
    path = tmp_path / "spec.yaml"
    assert offline.main(["spec", str(path)]) == 0
    return make_plan(load_text(path.read_text(), str(path))[0])


def test_the_image_recording_leaves_torch_and_its_cuda_wheels_out(closure, tmp_path):
    rec = tmp_path / "rec"
    listed = offline.facts(HERE / "image-packages.txt", closure, rec)
    # every package of the image, pinned from its own list (h200.sh dists, 2026-12-06)
    assert len(listed) == 197 and {"torch", "numpy", "cuda-toolkit", "nvidia-cublas",
                                   "triton", "torchvision"} <= set(listed)
    plan = plan_of(tmp_path)
    found = needs(plan)
    assert [(n.what, n.pips, n.hosts) for n in found] == [
        ("engines (venv)", ("vllm==0.23.0", "nixl==1.5.1"), ("h200a", "h200b")),
        ("gbundle-router", ("vllm-router==0.1.17",), ())]
    assert recorded(rec, plan) == ("3.12", "manylinux_2_39_x86_64")
    have = installed(rec, plan, found)
    assert have["h200a"][0] == "/opt/torch/.venv"
    assert have["h200b"][1]["torch"] == "2.11.0" and have["h200b"][1]["numpy"] == "2.5.2"

    names = {n.split("-")[0].replace("_", "-") for n in (TORCH, TOOLKIT, CUBLAS, TRITON, *KEPT)}
    skipped = skip_installed(closure, {found[0]: names, found[1]: {"idna"}}, have,
                             *recorded(rec, plan))
    # cuFFT: the image's 12.0.0.61 meets the closure's pin on it (12.0.0.61.*), so pip keeps it
    # and the 12.0.0.60 wheel goes; numpy stays: the image's 2.5.2 is not the closure's 2.3.5,
    # and no requirement in the closure says 2.5.2 will do
    assert [s.dist for s in skipped] == ["cuda-toolkit==13.0.2", "nvidia-cublas==13.1.0.3",
                                         "nvidia-cufft==12.0.0.60", "torch==2.11.0",
                                         "triton==3.6.0"]
    assert dict(skipped[3].hosts) == {"h200a": "/opt/torch/.venv",
                                          "h200b": "/opt/torch/.venv"}
    assert sorted(p.name for p in closure.iterdir()) == sorted(
        k for k in KEPT if not k.startswith("nvidia_cufft"))


def _names_only(tmp_path: Path, torch: str) -> Path:
    """image-packages.txt with every version dropped but torch's `torch` line."""
    lines = [ln.split("==")[0] for ln in (HERE / "image-packages.txt").read_text().splitlines()
             if ln and not ln.startswith("#")]
    image = tmp_path / "image.txt"
    image.write_text("\n".join(torch if ln == "torch" else ln for ln in lines) + "\n")
    return image


def test_a_names_only_list_learns_versions_from_torchs_wheel_pins(closure, tmp_path):
    """Where only torch's version is known (its local build tag included), the versions its
    wheel pins with == for Linux, through the extras it asks for, are the image's too."""
    rec = tmp_path / "rec"
    listed = offline.facts(_names_only(tmp_path, "torch==2.11.0+cu130"), closure, rec)
    assert sorted(listed) == ["cuda-toolkit", "nvidia-cublas", "torch", "triton"], listed
    plan = plan_of(tmp_path)
    found = needs(plan)
    have = installed(rec, plan, found)
    assert have["h200b"][1]["torch"] == "2.11.0+cu130" and "numpy" not in have["h200b"][1]
    names = {n.split("-")[0].replace("_", "-") for n in (TORCH, TOOLKIT, CUBLAS, TRITON, *KEPT)}
    skipped = skip_installed(closure, {found[0]: names, found[1]: {"idna"}}, have,
                             *recorded(rec, plan))
    # torch's wheel (2.11.0) is the image's 2.11.0+cu130: pip takes that for torch==2.11.0
    assert [s.dist for s in skipped] == ["cuda-toolkit==13.0.2", "nvidia-cublas==13.1.0.3",
                                         "torch==2.11.0", "triton==3.6.0"]


def test_a_names_only_list_without_the_torch_pin_leaves_nothing_out(closure, tmp_path):
    assert offline.facts(_names_only(tmp_path, "torch"), closure, tmp_path / "rec") == []


def test_the_layout_puts_each_file_in_one_call_of_at_most_the_limit(tmp_path):
    bundle, extra = tmp_path / "bundle", tmp_path / "extra"
    sizes = {"wheels/a.whl.000": 40, "wheels/a.whl.001": 40, "wheels/a.whl.002": 7,
             "wheels/b.whl": 30, "wheels/c.whl": 9, "wheels/d.whl": 1}
    for rel, size in {**sizes, "manifest.json": 2}.items():
        (bundle / rel).parent.mkdir(parents=True, exist_ok=True)
        (bundle / rel).write_bytes(b"x" * size)
    (extra / "pdctl-wheels").mkdir(parents=True)
    (extra / "debs.tar").write_bytes(b"d" * 20)
    (extra / "pdctl-wheels/p.whl").write_bytes(b"p" * 5)
    made = offline.layout(bundle, extra, tmp_path / "out", call=40)
    assert all(sum(s for _, s in files) <= 40 for files in made), made
    assert [rel for rel, _ in made[0]][:3] == ["debs.tar", "pdctl-wheels/p.whl",
                                               "bundle/manifest.json"]
    every = sorted(rel for files in made for rel, _ in files)
    assert every == sorted(["debs.tar", "pdctl-wheels/p.whl", "bundle/manifest.json",
                            *(f"bundle/{r}" for r in sizes)])
    assert len(made) == 4  # 27 | 40 | 40 | 30+9+1 ... 7 goes to the first
    for i, files in enumerate(made, 1):
        for rel, size in files:
            assert (tmp_path / "out" / str(i) / rel).stat().st_size == size
    with pytest.raises(SystemExit, match="more than one call"):
        offline.layout(bundle, extra, tmp_path / "out", call=39)


def test_a_wildcard_pin_matches_its_release_and_what_follows_it():
    assert offline.matches("13.1.0.3", "13.1.0.3.*") and offline.matches("13.1.0.3.1", "13.1.0.3.*")
    assert not offline.matches("13.1.0.30", "13.1.0.3.*") and offline.matches("2.1", "2.1")
    assert not offline.matches("2.1.1", "2.1")


def test_the_image_list_is_the_recorded_image():
    """image-packages.txt pins what `h200.sh dists` recorded on the GPU machine, name for name
    and version for version."""
    root = HERE.parents[1]
    dists = (root / "tests/fixtures/gpu/vllm023-h100-c/image-dists.txt").read_text()
    recorded_image = {offline.canon(n): v for _, n, v in (ln.split() for ln in dists.splitlines()
                                                          if ln.startswith("dist "))}
    assert offline.image_list(HERE / "image-packages.txt") == recorded_image


def _pdctl_closure() -> set[str]:
    """The names of pdctl's installed dependency closure (markers of this Python, no extras)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = ["pdctl"]
    while todo:
        for line in metadata.requires(todo.pop()) or []:
            req = Requirement(line)
            name = offline.canon(req.name)
            if (req.marker is None or req.marker.evaluate({"extra": ""})) and name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def test_the_stand_in_recording_is_what_preflight_recorded_on_the_gpu_machine(tmp_path):
    """`pdctl bundle --skip-installed` for the harness reads a recording that offline.py writes
    from image-packages.txt (no GPU machine at hand when bundling). The real one, which
    `preflight --bundle --record` wrote on the H100 before `up --bundle` (vllm023-h100-h), says
    the same through pdctl's own readers: Python, platform, environment, and every package of
    the image at its version. It lists more only where setup-bundle had installed pdctl's own
    dependencies first."""
    real = H100 / "bundle-rec"
    plan = plan_of(tmp_path)
    found = needs(plan)
    stand_in = tmp_path / "rec"
    offline.facts(HERE / "image-packages.txt", tmp_path, stand_in)
    assert recorded(real, plan) == recorded(stand_in, plan) == ("3.12", "manylinux_2_39_x86_64")
    have, pinned = installed(real, plan, found), installed(stand_in, plan, found)
    image = offline.image_list(HERE / "image-packages.txt")
    assert len(image) == 197
    for host in ("h200a", "h200b"):
        env, dists = have[host]
        assert env == pinned[host][0] == "/opt/torch/.venv"
        assert {n: v for n, v in dists.items() if n in image} == pinned[host][1] == image
        extra = set(dists) - set(image)
        assert len(extra) == 19 and extra <= _pdctl_closure(), sorted(extra - _pdctl_closure())


def test_the_gpu_machines_recording_replays_to_the_findings_it_gave_there(tmp_path):
    """What `preflight --bundle --record` printed on the H100 (bundle-preflight.txt), less the
    bundle.* rows (those need the 1.5 GB bundle itself), is what today's pdctl finds in the
    recording it made there: each row's status, check, host and what was found."""
    spec = yaml.safe_load((H100 / "bundle-spec.yaml").read_text())
    spec["model"]["config"] = str(HERE / "models/qwen3-8b/config.json")
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    res = pdctl("preflight", str(path), "--replay", str(H100 / "bundle-rec"), "--no-transfer",
                "-o", "json")
    assert res.returncode == 0, res.stderr
    now = [(f["status"], f["check"], f["where"], f["found"])
           for f in json.loads(res.stdout)["findings"]]
    rows = [[c.strip() for c in line.split("\u2502")[1:5]]
            for line in (H100 / "bundle-preflight.txt").read_text().splitlines()
            if line.startswith("\u2502")]
    there = [tuple(r) for r in rows if r[0] and not r[1].startswith("bundle.")]
    assert len(there) == 18 and now == there
    assert sum(r[1].startswith("bundle.") and r[0] == "PASS" for r in rows) == 7
