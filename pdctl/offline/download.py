"""`pdctl bundle`: pip downloads what the spec's hosts install, then the manifest is written.

pip does the resolution (`pip download --only-binary=:all: --python-version --platform
--implementation cp`): https://pip.pypa.io/en/stable/cli/pip_download/ ."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from pdctl import __version__
from pdctl.errors import PdctlError, UsageError
from pdctl.offline import manifest as mf
from pdctl.offline.hashes import Hashes
from pdctl.offline.need import Need, canon
from pdctl.offline.requires import meets, requirements, unmet
from pdctl.plan.model import Plan


def spec_hash(plan: Plan) -> str:
    return hashlib.sha256(plan.spec.model_dump_json().encode()).hexdigest()


def pip_command(need: Need, python: str, platform: str, dest: Path) -> list[str]:
    """The `pip download` of one environment's requirements (wheels only, for the hosts)."""
    return [
        sys.executable, "-m", "pip", "download",
        "--only-binary=:all:",
        "--python-version", python,
        *(arg for tag in platforms(platform) for arg in ("--platform", tag)),
        "--implementation", "cp",
        "--dest", str(dest),
        *need.pips,
    ]


def platforms(tag: str) -> list[str]:
    """A manylinux_2_Y tag and every older one: a host with glibc 2.Y runs them all (PEP 600:
    https://peps.python.org/pep-0600/), but pip takes a --platform tag as it is (it widens only
    manylinux2014 and manylinux2010: https://github.com/pypa/pip/blob/23.2.1/src/pip/_internal/
    utils/compatibility_tags.py#L46-L75), and CUDA wheels are often manylinux2014 or
    manylinux_2_27. Other tags as given."""
    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", tag)
    if not m:
        return [tag]
    glibc, machine = int(m.group(1)), m.group(2)
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    return [t for y in range(glibc, 4, -1) for t in (
        f"manylinux_2_{y}_{machine}", *([f"{legacy[y]}_{machine}"] if y in legacy else []))]


def keep_good(folder: Path, hashes: Hashes) -> int:
    """Before downloading again: drop the old manifest (a run that stops half-way leaves none)
    and every file in wheels/ it does not vouch for, so pip never reuses a damaged file.
    Returns how many files were kept."""
    try:
        old = mf.read(folder)
        for split in old.files:  # a --split file whole again, so that it can be kept
            with contextlib.suppress(mf.BundleError):
                mf.join(folder, split)
    except mf.BundleError:
        old = None
    (folder / mf.MANIFEST).unlink(missing_ok=True)
    good = {} if old is None else {e.path: e for e in old.files}
    kept = 0
    wheels, weights, images = folder / mf.WHEELS, folder / mf.WEIGHTS, folder / mf.IMAGES
    paths = sorted(wheels.iterdir()) if wheels.is_dir() else []
    paths += sorted(images.iterdir()) if images.is_dir() else []
    paths += sorted(weights.rglob("*")) if weights.is_dir() else []
    adapters = folder / mf.ADAPTERS
    paths += sorted(adapters.rglob("*")) if adapters.is_dir() else []
    for path in paths:
        entry = good.get(path.relative_to(folder).as_posix())
        if path.is_file() and entry is not None and mf.check_file(folder, entry,
                                                                   hashes.of) is None:
            kept += 1
        elif path.is_file() or path.is_symlink():
            path.unlink()
    return kept


def snapshot_files(source: Path, what: str = "--weights", kind: str = "model"
                   ) -> dict[str, Path]:
    """A local Hugging Face snapshot folder's files by their path in it (links followed, as
    the hub cache's snapshots/<rev>/ links to blobs; hidden files and folders left out).
    UsageError when it is no model (kind "adapter": no LoRA adapter) folder."""
    needs = "config.json" if kind == "model" else f"{kind}_config.json"
    if not source.is_dir():
        raise UsageError(f"{what} {source}: no such folder",
                         fix=f"give a local {kind} folder ({needs}, *.safetensors, ...)")
    if not (source / needs).is_file():
        raise UsageError(f"{what} {source}: no {needs}: not a Hugging Face {kind} folder",
                         fix="give the snapshot folder, e.g. ~/.cache/huggingface/hub/"
                         "models--ORG--NAME/snapshots/REVISION")
    out = {}
    for root, dirs, names in os.walk(source, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            path = Path(root) / name
            if not name.startswith(".") and path.is_file():
                out[path.relative_to(source).as_posix()] = path
    return out


def copy_tree(files: dict[str, Path], dest: Path, hashes: Hashes) -> tuple[int, int]:
    """`files` (path below dest -> source) into dest: a file already there with the same
    sha256 stays; files there that are not in `files` are removed. Returns (copied, kept)."""
    for path in sorted(dest.rglob("*"), reverse=True) if dest.is_dir() else []:
        rel = path.relative_to(dest).as_posix()
        if path.is_file() and rel not in files:
            path.unlink()
    copied = kept = 0
    for rel, src in files.items():
        there = dest / rel
        if (there.is_file() and there.stat().st_size == src.stat().st_size
                and hashes.of(there) == hashes.of(src)):
            kept += 1
            continue
        there.parent.mkdir(parents=True, exist_ok=True)
        hashes.copy(src, there)
        copied += 1
    return copied, kept


def bundle(
    plan: Plan,
    found: tuple[Need, ...],
    python: str,
    platform: str,
    folder: Path,
    say: Callable[[str], None],
    weights: Path | None = None,
    images: tuple[str, ...] = (),
    adapters: dict[str, Path] | None = None,
    split: int = 0,
    have: dict[str, tuple[str, dict[str, str]]] | None = None,
    facts: str = "",
) -> mf.Manifest:
    """Download every environment's wheels into folder/wheels, copy the model's snapshot folder
    into folder/weights (`weights`) and the LoRA adapters' files (`adapters`: path below
    folder/adapters -> source) into folder/adapters, leave out the wheels every host that
    installs them has (`have`: host -> (environment, {canon name: version}), from the
    recording `facts`), cut files over `split` bytes into parts, and write the manifest last."""
    if weights is not None:
        snapshot_files(weights)  # refused before anything is downloaded
    if folder.exists() and not folder.is_dir():
        raise PdctlError(f"{folder}: not a folder")
    (folder / mf.WHEELS).mkdir(parents=True, exist_ok=True)
    try:
        before = {r: (r, i, f) for r, i, f in mf.read(folder).images}
    except mf.BundleError:
        before = {}
    hashes = Hashes(folder)  # what an earlier run read, while unchanged (offline/hashes.py)
    kept = keep_good(folder, hashes)
    if kept:
        say(f"{kept} files already present with the right sha256: kept")
    if weights is not None:
        copied, had = copy_tree(snapshot_files(weights), folder / mf.WEIGHTS, hashes)
        say(f"weights from {weights}: {copied} files copied, {had} already there")
    else:
        shutil.rmtree(folder / mf.WEIGHTS, ignore_errors=True)
    if adapters:
        copied, had = copy_tree(adapters, folder / mf.ADAPTERS, hashes)
        say(f"LoRA adapters: {copied} files copied, {had} already there")
    else:
        shutil.rmtree(folder / mf.ADAPTERS, ignore_errors=True)
    from pdctl.offline import images as im

    tars: tuple[im.Image, ...] = ()
    if images:
        tars = im.save(images, folder, {r: im.Image(*v) for r, v in before.items()}, say)
    else:
        shutil.rmtree(folder / mf.IMAGES, ignore_errors=True)
    if plan.on_kubernetes:  # the image list and the script that fills a registry mirror
        im.write_mirror(folder, im.pinned(im.refs(plan), say), tars,
                        plan.spec.kubernetes.image_mirror)
    closures: dict[Need, set[str] | None] = {}
    files: list[tuple[set[str] | None, set[str]]] = []
    for need in found:
        say(f"resolving {' '.join(need.pips)} for {need.what} (Python {python}, {platform})")
        names, got = resolve(need, python, platform, folder / mf.WHEELS, say)
        closures[need] = names
        files.append((names, got))
    prune(folder / mf.WHEELS, files, say)
    skipped: tuple[mf.Skipped, ...] = ()
    if have is not None:
        skipped = skip_installed(folder / mf.WHEELS, closures, have, python, platform)
        if skipped:
            mb = sum(k.size for k in skipped) / 1e6
            say(f"left out {len(skipped)} wheels ({mb:.1f} MB) the hosts have "
                f"(--skip-installed): {' '.join(left_out(k, have) for k in skipped)}")
    manifest = mf.Manifest(
        pdctl=__version__,
        spec=spec_hash(plan),
        python=python,
        platform=platform,
        needs=tuple((n.what, n.pips) for n in found),
        files=mf.entries(folder, hashes.of),
        weights="" if weights is None else str(weights),
        images=tuple((i.ref, i.id, i.file) for i in tars),
        skipped=skipped,
        facts=facts if have is not None else "",
    )
    hashes.save()
    if split:
        manifest = mf.split(folder, manifest, split)
    mf.write(folder, manifest)
    return manifest


# How often `resolve` asks pip again with the requirements its markers hid (one is usual).
ROUNDS = 3


def resolve(need: Need, python: str, platform: str, dest: Path,
            say: Callable[[str], None]) -> tuple[set[str] | None, set[str]]:
    """`download` one environment, then check its closure as the hosts' pip will read it
    (`requires.unmet`): a requirement pip skipped because its marker is false on the Python
    pdctl runs on, or one whose wheel it chose for that Python, is added to the environment's
    requirements, without its marker, and pip resolves again. The host installs the
    environment's own requirements: its pip, on the hosts' Python, asks what was added.
    Returns the last resolution's names and wheel files (`download`)."""
    added: tuple[str, ...] = ()
    for _ in range(ROUNDS):
        names, files = download(replace(need, pips=need.pips + added), python, platform, dest)
        missed = [r for r in unmet(dest, files, python, platform) if r not in added]
        if not missed:
            return names, files
        running = f"{sys.version_info.major}.{sys.version_info.minor}"
        say(f"pip ran on Python {running}, and on the hosts' Python {python} the closure also "
            f"asks {', '.join(missed)} (environment markers): resolving again with "
            f"{'it' if len(missed) == 1 else 'them'}")
        added += tuple(missed)
    raise PdctlError(f"the closure of {' '.join(need.pips)} for Python {python} still lacks "
                     f"{', '.join(missed)} after {ROUNDS} resolutions; run pdctl bundle with "
                     f"Python {python}, whose pip reads the markers as the hosts' will")


def prune(wheels: Path, closures: list[tuple[set[str] | None, set[str]]],
          say: Callable[[str], None]) -> None:
    """Remove the wheels no closure of this run holds (an earlier bundle's: another spec, a
    version since changed, a resolution made again), where every closure's files are known:
    pip named each resolved distribution and a wheel was seen for each. Otherwise keep all."""
    wanted: set[str] = set()
    for names, got in closures:
        if names is None or names - {canon(f.split("-")[0]) for f in got}:
            return  # what pip resolved is not fully known: nothing is removed
        wanted |= got
    extra = sorted(p for p in wheels.iterdir() if p.is_file() and p.name not in wanted
                   and not p.name.startswith("."))
    for path in extra:
        path.unlink()
    if extra:
        say(f"removed {len(extra)} wheels that no environment of this spec needs (an earlier "
            f"bundle's): {' '.join(p.name for p in extra)}")


def download(need: Need, python: str, platform: str, dest: Path
             ) -> tuple[set[str] | None, set[str]]:
    """`pip download` of one environment (its output shown on stderr as it comes): the names
    of its closure (pip's `Successfully downloaded NAME ...`: every distribution it resolved,
    those already in dest too; None when pip did not say) and its wheels' file names (pip's
    `Saved PATH` and `File was already downloaded PATH` lines)."""
    cmd = pip_command(need, python, platform, dest)
    lines = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stderr.write(line)
            lines.append(line.strip())
    if proc.returncode != 0:
        last = [ln for ln in lines if ln][-1:] or ["(no output)"]
        raise PdctlError(f"pip download of {' '.join(need.pips)} for Python {python} on "
                         f"{platform} failed: {last[0]}")
    said = [ln for ln in lines if ln.startswith("Successfully downloaded ")]
    files = {Path(m.group(1)).name for ln in lines
             if (m := re.match(r"(?:Saved|File was already downloaded) (.+\.whl)$", ln))}
    return ({canon(n) for n in said[-1].split()[2:]} if said else None), files


def satisfies(installed: str | None, version: str) -> bool:
    """Whether a host's installed VERSION stands for the wheel's: the same text, or the wheel's
    public version with a local label added (torch `2.11.0+cu130` from the PyTorch index for the
    wheel `2.11.0`): pip takes it for `==2.11.0`, a specifier without a local label ignoring the
    candidate's (https://packaging.python.org/en/latest/specifications/version-specifiers/
    #version-matching), so it installs nothing for it. A wheel with a local label of its own
    wants that one."""
    try:
        return meets(installed, [SpecifierSet(f"=={version}")])
    except InvalidSpecifier:  # not a PEP 440 version: only the same text
        return installed == version


def left_out(k: mf.Skipped, have: dict[str, tuple[str, dict[str, str]]]) -> str:
    """NAME==VERSION of a left-out wheel, with the hosts' own versions where they differ."""
    name, version = k.dist.split("==", 1)
    other = sorted({v for h, _ in k.hosts if (v := have[h][1].get(name, version)) != version})
    return k.dist + (f" (hosts have {', '.join(other)})" if other else "")


def skip_installed(wheels: Path, closures: dict[Need, set[str] | None],
                   have: dict[str, tuple[str, dict[str, str]]], python: str,
                   platform: str) -> tuple[mf.Skipped, ...]:
    """Remove each wheel whose distribution every host of every environment that resolved it
    has: in the wheel's version (`satisfies`: a local label on the host's version allowed), or
    in one that meets every requirement the closure puts on it (`requires.meets`), which pip
    keeps. A service's venv is not recorded: its wheels stay, and so do those of an
    environment whose closure pip did not name."""
    wanted = requirements(wheels, (p for n in closures for p in n.pips), python, platform)
    out = []
    for path in sorted(wheels.glob("*.whl")):
        name, version = path.name.split("-")[:2]
        name = canon(name)
        envs = [n for n, names in closures.items() if names is None or name in names]
        hosts = sorted({h for n in envs for h in n.hosts})
        got = [have[h][1].get(name) for h in hosts]
        if not envs or not all(n.hosts for n in envs) or not all(
                satisfies(v, version) or (wanted is not None and name in wanted
                                          and meets(v, wanted[name])) for v in got):
            continue
        out.append(mf.Skipped(path.name, f"{name}=={version}", path.stat().st_size,
                              tuple((h, have[h][0]) for h in hosts)))
        path.unlink()
    return tuple(out)
