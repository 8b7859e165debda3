"""`pdctl bundle` and the bundle's manifest: what a spec's hosts install (pip resolves it for
their Python and platform), every file pinned by sha256 and size, a damaged or incomplete
bundle refused in one line naming the file, a second run incremental; start scripts rendered
for a bundle install with --no-index from its wheels only."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from pdctl.errors import PdctlError
from pdctl.offline import manifest as mf
from pdctl.offline.download import bundle, keep_good, pip_command, prune
from pdctl.offline.hashes import Hashes
from pdctl.offline.need import Need, needs
from pdctl.plan.model import Plan
from pdctl.render import render
from tests.helpers import ROOT, pdctl, plan_of

EXAMPLES = ROOT / "examples"


def test_a_nixl_spec_needs_vllm_with_nixl_in_the_engines_env_and_the_router_in_its_own():
    plan = plan_of(EXAMPLES / "phase2-nixl-hosts.yaml")
    found = needs(plan)
    assert [(n.what, n.pips) for n in found] == [
        ("engines (venv)", (plan.release.pip, "nixl==1.5.1")),
        ("qwen-nixl-router", ("vllm-router==0.1.17",)),
    ]

REFUSED = yaml.safe_load((Path(__file__).parent / "data" / "bundle-refusals.yaml").read_text())


@pytest.mark.parametrize(
    ("args", "says"), [(c["args"], c["says"]) for c in REFUSED]
)
def test_what_cannot_be_bundled_is_refused_in_one_line(tmp_path: Path, args, says):
    out = tmp_path / "b"
    result = pdctl("bundle", *args, "-o", str(out))
    assert result.returncode == 2, result.stderr
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not out.exists()  # refused before anything is downloaded or written


def pip_lines(plan: Plan) -> list[str]:
    return [ln for a in render(plan).artifacts for ln in a.text.splitlines()
            if re.search(r"\bpip install\b", ln) or "conda create" in ln]


@pytest.mark.parametrize(
    "example", ["phase0-conda.yaml", "phase2-nixl-hosts.yaml", "phase2-mooncake-tcp.yaml"]
)
def test_scripts_rendered_for_a_bundle_install_from_its_wheels_only(example: str):
    plan = plan_of(EXAMPLES / example)
    networked = pip_lines(plan)
    assert networked and not any("--no-index" in ln for ln in networked)  # the test can fail
    lines = pip_lines(replace(plan, bundled=True))
    assert len(lines) == len([ln for ln in networked if "pip install" in ln])
    for line in lines:
        assert re.search(r"pip install --no-index --find-links \S+/wheels \S+==\S+$", line), line
        assert "://" not in line and "--index-url" not in line
    texts = "\n".join(a.text for a in render(replace(plan, bundled=True)).artifacts)
    assert "conda create" not in texts


def make_bundle(folder: Path, files: dict[str, bytes], pips: tuple[str, ...]) -> mf.Manifest:
    (folder / mf.WHEELS).mkdir(parents=True)
    for name, data in files.items():
        (folder / mf.WHEELS / name).write_bytes(data)
    made = mf.Manifest("0", "spec", "3.11", "manylinux_2_28_x86_64", (("engines", pips),),
                       mf.entries(folder))
    mf.write(folder, made)
    return made


WHEELS = {"a-1.0-py3-none-any.whl": b"a" * 100, "b-2.0-py3-none-any.whl": b"b" * 50}


def test_a_complete_bundle_verifies_with_every_file_hashed(tmp_path: Path):
    made = make_bundle(tmp_path, WHEELS, ("a==1.0",))
    data = json.loads((tmp_path / mf.MANIFEST).read_text())
    assert [(f["path"], f["size"]) for f in data["files"]] == [
        ("wheels/a-1.0-py3-none-any.whl", 100), ("wheels/b-2.0-py3-none-any.whl", 50)]
    assert all(len(f["sha256"]) == 64 for f in data["files"])
    assert mf.verify(tmp_path) == made


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda w: w.write_bytes(b"x" + b"a" * 99), "a-1.0-py3-none-any.whl: sha256 differs"),
        (lambda w: w.write_bytes(b"a" * 99), "a-1.0-py3-none-any.whl: size 99, the manifest"),
        (lambda w: w.unlink(), "a-1.0-py3-none-any.whl: missing"),
        (lambda w: (w.parent.parent / mf.MANIFEST).unlink(), "manifest.json: missing"),
        (lambda w: (w.parent.parent / mf.MANIFEST).write_text("{"), "manifest.json: unreadable"),
        (lambda w: (w.parent.parent / mf.MANIFEST).write_text(
            (w.parent.parent / mf.MANIFEST).read_text().replace("wheels/b-", "wheels/../b-")),
         "malformed manifest (file path 'wheels/../b-"),
    ],
)
def test_a_damaged_or_incomplete_bundle_is_refused_naming_the_file(tmp_path, damage, says):
    make_bundle(tmp_path, WHEELS, ("a==1.0",))
    damage(tmp_path / mf.WHEELS / "a-1.0-py3-none-any.whl")
    with pytest.raises(mf.BundleError) as err:
        mf.verify(tmp_path)
    assert says in str(err.value) and err.value.exit_code == 2, err.value


def test_a_bundle_without_what_the_spec_installs_is_refused(tmp_path: Path):
    made = make_bundle(tmp_path, WHEELS, ("a==1.0",))
    mf.covers(made, {"a==1.0"}, tmp_path)
    with pytest.raises(mf.BundleError, match="does not carry vllm==9.9, which the spec"):
        mf.covers(made, {"a==1.0", "vllm==9.9"}, tmp_path)


def test_before_a_second_run_only_files_the_manifest_vouches_for_stay(tmp_path: Path):
    make_bundle(tmp_path, WHEELS, ("a==1.0",))
    (tmp_path / mf.WHEELS / "b-2.0-py3-none-any.whl").write_bytes(b"B" * 50)  # damaged
    (tmp_path / mf.WHEELS / "c-1.0-py3-none-any.whl").write_bytes(b"c")  # not vouched for
    assert keep_good(tmp_path, Hashes(tmp_path)) == 1
    assert sorted(p.name for p in (tmp_path / mf.WHEELS).iterdir()) == ["a-1.0-py3-none-any.whl"]
    assert not (tmp_path / mf.MANIFEST).exists()  # until the run completes


def test_pip_downloads_for_the_hosts_python_and_the_manifest_comes_last(tmp_path: Path):
    """A real `pip download` (from the package index this machine has) of a small package:
    the wheel lands in wheels/, the manifest names it; a second run keeps it; a damaged copy
    is downloaded again; a failed resolution leaves no manifest."""
    plan = plan_of(EXAMPLES / "phase0-conda.yaml")
    found = (Need("test", ("six==1.17.0",)),)
    said: list[str] = []
    made = bundle(plan, found, "3.11", "manylinux_2_28_x86_64", tmp_path, said.append)
    assert [e.path for e in made.files] == ["wheels/six-1.17.0-py2.py3-none-any.whl"]
    assert made.needs == (("test", ("six==1.17.0",)),) and made.python == "3.11"
    assert mf.verify(tmp_path) == made
    wheel = tmp_path / made.files[0].path
    inode = wheel.stat().st_ino
    bundle(plan, found, "3.11", "manylinux_2_28_x86_64", tmp_path, said.append)
    assert wheel.stat().st_ino == inode and "1 files already present" in said[-2], said
    wheel.write_bytes(b"damaged")
    again = bundle(plan, found, "3.11", "manylinux_2_28_x86_64", tmp_path, said.append)
    assert again == made and mf.verify(tmp_path) == made
    with pytest.raises(PdctlError, match="pip download of six==0.0.1 for Python 3.11 on "):
        bundle(plan, (Need("test", ("six==0.0.1",)),), "3.11", "manylinux_2_28_x86_64",
               tmp_path, said.append)
    assert not (tmp_path / mf.MANIFEST).exists()


def recording(root: Path, hosts: dict[str, tuple[str, str]]) -> Path:
    """A preflight recording of bundle.txt alone: host -> (Python, glibc)."""
    for name, (python, glibc) in hosts.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "bundle.txt").write_text(
            f"from python3\npython {python}\nglibc glibc {glibc}\nmachine x86_64\n"
            "free 1000000\nmount /\n")
    return root


def test_the_hosts_python_and_platform_come_from_a_preflight_recording(tmp_path: Path):
    over = tmp_path / "two.yaml"
    over.write_text("hosts:\n  - {name: gpu-b, address: 192.0.2.11, user: ubuntu, "
                    "gpus: [0, 1], runtime: venv, venv: /opt/vllm}\n")
    rec = recording(tmp_path / "rec", {"gpu-a": ("3.12", "2.35"), "gpu-b": ("3.11", "2.31")})
    args = ("bundle", "examples/phase2-nixl-hosts.yaml", "--overlay", str(over), "-o",
            str(tmp_path / "b"), "--facts", str(rec))
    differ = pdctl(*args)
    assert differ.returncode == 2 and differ.stderr.startswith(
        f"error: --facts {rec}: the hosts have different Pythons (gpu-a: 3.12, gpu-b: 3.11)"
    ), differ.stderr
    recording(rec, {"gpu-b": ("3.12", "2.31")})
    # pip asks a closed loopback port for the index: it fails at once, naming what it resolved
    got = pdctl(*args, env={"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0",
                            "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": ""})
    assert f"from the recording {rec}: --python 3.12 --platform manylinux_2_31_x86_64" in (
        got.stderr), got.stderr
    assert got.returncode == 1 and "for Python 3.12 on manylinux_2_31_x86_64 failed" in (
        got.stderr), got.stderr


def test_a_manylinux_tag_takes_the_wheels_of_older_glibcs_too():
    """pip takes a --platform tag as it is: manylinux_2_28 alone would miss the manylinux2014
    and manylinux_2_27 wheels (most CUDA wheels) that a glibc 2.28 host runs."""
    cmd = pip_command(Need("e", ("a==1",)), "3.11", "manylinux_2_28_x86_64", Path("w"))
    tags = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--platform"]
    assert tags[:2] == ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64"] and len(tags) == 27
    assert {"manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert "manylinux_2_29_x86_64" not in tags
    legacy = pip_command(Need("e", ("a==1",)), "3.11", "manylinux2014_aarch64", Path("w"))
    assert legacy.count("--platform") == 1 and "manylinux2014_aarch64" in legacy


def index_wheel(folder: Path, name: str, version: str, *requires: str) -> None:
    """A pure wheel pip can download from a --find-links folder (METADATA, WHEEL, RECORD)."""
    import zipfile

    info = f"{name}-{version}.dist-info"
    meta = "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        whl.writestr(f"{info}/METADATA",
                     f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{meta}")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                     "Root-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", "")


def test_requirements_behind_markers_true_on_the_hosts_python_are_resolved_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    """pip evaluates environment markers with the Python it runs on, not --python-version: a
    bundle made on Python 3.11 for hosts on 3.12 lacked vLLM 0.23.0's `setuptools<81;
    python_version > "3.11"` (it held setuptools 81.0.0, which torch's <82 allows) and the
    hosts' pip stopped at 'No matching distribution found for setuptools<81.0.0,>=77.0.3'.
    pdctl reads the closure as the hosts' pip will and resolves again with what it asks."""
    import sys

    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    hosts = "3.13" if running == "3.12" else "3.12"
    index = tmp_path / "index"
    index.mkdir()
    only_there = f'python_version == "{hosts}"'
    index_wheel(index, "app", "1.0", "lib", f"pin<2; {only_there}", f"late; {only_there}")
    index_wheel(index, "lib", "1.0", "pin")
    for version in ("1.0", "2.0"):
        index_wheel(index, "pin", version)
    index_wheel(index, "late", "1.0")
    for key, value in {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index),
                       "PIP_CONSTRAINT": "", "PIP_INDEX_URL": ""}.items():
        monkeypatch.setenv(key, value)
    plan = plan_of(EXAMPLES / "phase0-conda.yaml")
    said: list[str] = []
    made = bundle(plan, (Need("engines (venv)", ("app==1.0",)),), hosts,
                  "manylinux_2_28_x86_64", tmp_path / "b", said.append)
    wheels = sorted(Path(e.path).name.split("-py3")[0] for e in made.files)
    # the first resolution's pin 2.0 is no wheel of the closure the hosts install: removed
    assert wheels == ["app-1.0", "late-1.0", "lib-1.0", "pin-1.0"], (wheels, said)
    assert "removed 1 wheels that no environment of this spec needs (an earlier bundle's): " \
        "pin-2.0-py3-none-any.whl" in said, said
    assert any(f"pip ran on Python {running}, and on the hosts' Python {hosts} the closure "
               "also asks late, pin<2" in s for s in said), said
    assert made.needs == (("engines (venv)", ("app==1.0",)),)  # what the hosts install
    # on the Python pdctl runs on, nothing is added: the same closure as pip's own
    said.clear()
    again = bundle(plan, (Need("engines (venv)", ("app==1.0",)),), running,
                   "manylinux_2_28_x86_64", tmp_path / "c", said.append)
    assert sorted(Path(e.path).name.split("-py3")[0] for e in again.files) == [
        "app-1.0", "lib-1.0", "pin-2.0"], said
    assert not any("resolving again" in s for s in said), said
    # the same folder bundled for another environment keeps only that one's wheels
    other = bundle(plan, (Need("engines (venv)", ("late==1.0",)),), running,
                   "manylinux_2_28_x86_64", tmp_path / "c", said.append)
    assert [Path(e.path).name for e in other.files] == ["late-1.0-py3-none-any.whl"], said
    assert said[-1].startswith("removed 3 wheels that no environment of this spec needs"), said


@pytest.mark.parametrize(("closures", "left"), [
    ([({"app"}, {"app-1.0-py3-none-any.whl"})], ["app-1.0-py3-none-any.whl"]),  # old removed
    ([(None, {"app-1.0-py3-none-any.whl"})],  # pip named nothing
     ["app-1.0-py3-none-any.whl", "old-0.1-py3-none-any.whl"]),
    ([({"app", "lib"}, {"app-1.0-py3-none-any.whl"})],  # pip named lib, no wheel seen for it
     ["app-1.0-py3-none-any.whl", "old-0.1-py3-none-any.whl"]),
    ([({"app"}, {"app-1.0-py3-none-any.whl"}), (None, set())],  # one closure unknown: keep all
     ["app-1.0-py3-none-any.whl", "old-0.1-py3-none-any.whl"]),
])
def test_prune_removes_wheels_only_where_every_closure_is_known(tmp_path, closures, left):
    for name in ("app-1.0-py3-none-any.whl", "old-0.1-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"w")
    said: list[str] = []
    prune(tmp_path, closures, said.append)
    assert sorted(p.name for p in tmp_path.iterdir()) == left, said
    assert bool(said) == (len(left) == 1)
