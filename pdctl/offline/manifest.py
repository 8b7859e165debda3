"""The bundle's manifest: every file with its sha256 and size, the spec's hash, the pdctl
version and what was resolved for which Python and platform. Written last, so a bundle
whose download stopped half-way has none and is refused."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from pdctl.errors import UsageError

MANIFEST = "manifest.json"
WHEELS = "wheels"
IMAGES = "images"  # container images (`pdctl bundle --images`), one tar each
WEIGHTS = "weights"  # a Hugging Face snapshot folder (`pdctl bundle --weights`), as it was
ADAPTERS = "adapters"  # LoRA adapters (`pdctl bundle --adapters`): one snapshot per folder
TREES = (WEIGHTS, ADAPTERS)  # the parts kept as folders (every level)
FORMAT = 1
CHUNK = 1 << 20


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the bundle folder, e.g. wheels/vllm-0.23.0-....whl
    sha256: str
    size: int
    parts: int = 0  # `--split`: kept as PATH.000, PATH.001, ... (joined before use), else 0


@dataclass(frozen=True)
class Skipped:
    """A wheel left out (`pdctl bundle --skip-installed`): every host that installs it has
    its distribution already, in the environment the recording names (host -> env)."""

    wheel: str  # the file name pip downloaded
    dist: str  # NAME==VERSION
    size: int
    hosts: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Manifest:
    pdctl: str
    spec: str  # sha256 of the validated spec
    python: str
    platform: str
    needs: tuple[tuple[str, tuple[str, ...]], ...]  # (environment, pinned requirements)
    files: tuple[Entry, ...]
    weights: str = ""  # the snapshot folder the weights/ files came from ("" = none)
    images: tuple[tuple[str, str, str], ...] = ()  # (reference, image id, images/NAME.tar)
    skipped: tuple[Skipped, ...] = ()
    facts: str = ""  # the recording --skip-installed read

    def as_data(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "pdctl": self.pdctl,
            "spec": self.spec,
            "python": self.python,
            "platform": self.platform,
            "needs": [{"for": what, "requirements": list(pips)} for what, pips in self.needs],
            "files": [{"path": e.path, "sha256": e.sha256, "size": e.size,
                       **({"parts": e.parts} if e.parts else {})} for e in self.files],
            **({"weights": self.weights} if self.weights else {}),
            **({"images": [{"ref": r, "id": i, "file": f} for r, i, f in self.images]}
               if self.images else {}),
            **({"facts": self.facts, "skipped": [
                {"wheel": k.wheel, "dist": k.dist, "size": k.size, "installed": dict(k.hosts)}
                for k in self.skipped]} if self.facts else {}),
        }

    def requirements(self) -> set[str]:
        return {p for _, pips in self.needs for p in pips}

    def total(self) -> int:
        return sum(e.size for e in self.files)

    def part(self, top: str) -> dict[str, Entry]:
        """The files under `top` (WHEELS or WEIGHTS), by their path below it."""
        return {e.path.removeprefix(f"{top}/"): e for e in self.files
                if e.path.startswith(f"{top}/")}


class BundleError(UsageError):
    """A bundle folder that is not complete, or not what it says (exit 2)."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def entries(folder: Path, sha: Callable[[Path], str] = sha256_of) -> tuple[Entry, ...]:
    """The files under folder/wheels, folder/images and the TREES (every level), hashed (by
    `sha`), in name order."""
    out = []
    for top in (IMAGES, WHEELS):
        flat = folder / top
        for path in sorted(flat.iterdir()) if flat.is_dir() else []:
            if path.is_file() and not path.name.startswith("."):
                out.append(Entry(f"{top}/{path.name}", sha(path), path.stat().st_size))
    for tree in (folder / t for t in TREES):
        for path in sorted(tree.rglob("*")) if tree.is_dir() else []:
            rel = path.relative_to(folder).as_posix()
            if path.is_file() and not any(p.startswith(".") for p in path.relative_to(tree).parts):
                out.append(Entry(rel, sha(path), path.stat().st_size))
    return tuple(out)


def safe_path(path: str) -> bool:
    """wheels/NAME, images/NAME, weights/REL or adapters/REL (no empty, `.` or `..` part, no
    leading /)."""
    top, _, rest = path.partition("/")
    parts = rest.split("/")
    if top in (WHEELS, IMAGES) and len(parts) != 1:
        return False
    return top in (WHEELS, IMAGES, *TREES) and all(p not in ("", ".", "..") for p in parts)


def write(folder: Path, manifest: Manifest) -> None:
    """The manifest, atomically (a temporary file renamed into place)."""
    text = json.dumps(manifest.as_data(), indent=1, sort_keys=True) + "\n"
    tmp = folder / f".{MANIFEST}.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, folder / MANIFEST)


def read(folder: Path) -> Manifest:
    """The folder's manifest; BundleError naming the file when it is absent or malformed."""
    where = folder / MANIFEST
    if not folder.is_dir():
        raise BundleError(f"{folder}: no such bundle folder", fix="run `pdctl bundle SPEC -o DIR`")
    try:
        data = json.loads(where.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(
            f"{where}: missing: the bundle is incomplete (`pdctl bundle` writes it last)",
            fix="run `pdctl bundle SPEC -o DIR` again",
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BundleError(f"{where}: unreadable ({exc})", fix="run `pdctl bundle` again") from None
    try:
        if data["format"] != FORMAT:
            raise ValueError(f"format {data['format']!r}, this pdctl reads {FORMAT}")
        files = tuple(
            Entry(str(f["path"]), str(f["sha256"]), int(f["size"]), int(f.get("parts", 0)))
            for f in data["files"]
        )
        needs = tuple((str(n["for"]), tuple(str(p) for p in n["requirements"]))
                      for n in data["needs"])
        for e in files:
            if not safe_path(e.path):
                raise ValueError(f"file path {e.path!r} is not wheels/NAME, images/NAME, "
                                 "weights/PATH or adapters/PATH")
        images = tuple((str(i["ref"]), str(i["id"]), str(i["file"]))
                       for i in data.get("images", []))
        if any(f not in {e.path for e in files} for _, _, f in images):
            raise ValueError("an image's file is not in the files")
        skipped = tuple(Skipped(str(k["wheel"]), str(k["dist"]), int(k["size"]),
                                tuple((str(h), str(e)) for h, e in k["installed"].items()))
                        for k in data.get("skipped", []))
        return Manifest(str(data["pdctl"]), str(data["spec"]), str(data["python"]),
                        str(data["platform"]), needs, files, str(data.get("weights", "")),
                        images, skipped, str(data.get("facts", "")))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise BundleError(f"{where}: malformed manifest ({exc})",
                          fix="run `pdctl bundle SPEC -o DIR` again") from None


def check_file(folder: Path, entry: Entry, sha: Callable[[Path], str] = sha256_of) -> str | None:
    """Why the file does not match its entry, or None."""
    path = folder / entry.path
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "missing"
    if size != entry.size:
        return f"size {size}, the manifest says {entry.size}"
    if sha(path) != entry.sha256:
        return "sha256 differs from the manifest"
    return None


def part_names(entry: Entry) -> list[str]:
    return [f"{entry.path}.{i:03d}" for i in range(entry.parts)]


def split(folder: Path, manifest: Manifest, most: int) -> Manifest:
    """`--split`: every file over `most` bytes cut into PATH.000, PATH.001, ... of `most`
    bytes each (the last one less) and removed; the manifest keeps its sha256 and size and
    says how many parts it has."""
    files = []
    for e in manifest.files:
        if e.size > most:
            e = Entry(e.path, e.sha256, e.size, -(-e.size // most))
            with (folder / e.path).open("rb") as fh:
                for name in part_names(e):
                    (folder / name).write_bytes(fh.read(most))
            (folder / e.path).unlink()
        files.append(e)
    return replace(manifest, files=tuple(files))


def join(folder: Path, entry: Entry) -> None:
    """A split file put together again from its parts (then the parts removed), where it is
    not whole yet; BundleError naming a missing part."""
    if not entry.parts or (folder / entry.path).is_file():
        return
    for name in part_names(entry):
        if not (folder / name).is_file():
            raise BundleError(f"{folder / name}: missing; the bundle is incomplete (a part of "
                              f"{entry.path}, split by --split)",
                              fix="copy every part of the bundle, or run `pdctl bundle` again")
    tmp = folder / f"{entry.path}.joining"
    try:
        with tmp.open("wb") as out:
            for name in part_names(entry):
                with (folder / name).open("rb") as fh:
                    while block := fh.read(CHUNK):
                        out.write(block)
        os.replace(tmp, folder / entry.path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise BundleError(f"{folder / entry.path}: cannot join its parts ({exc.strerror})",
                          fix="copy the bundle to a writable disk with room for it") from None
    for name in part_names(entry):
        (folder / name).unlink()


def verify(folder: Path) -> Manifest:
    """The manifest, after joining the parts of split files and checking every file it lists
    (size, then sha256); BundleError naming the first file that is missing or differs."""
    manifest = read(folder)
    for entry in manifest.files:
        join(folder, entry)
        why = check_file(folder, entry)
        if why is not None:
            raise BundleError(f"{folder / entry.path}: {why}; the bundle is corrupted or "
                              f"incomplete", fix="run `pdctl bundle SPEC -o DIR` again")
    return manifest


def covers(manifest: Manifest, wanted: set[str], folder: Path,
           images: tuple[str, ...] = ()) -> None:
    """BundleError when the bundle lacks a requirement the plan installs or an image its
    containers run."""
    lacking = sorted(set(images) - {r for r, _, _ in manifest.images})
    if lacking:
        raise BundleError(
            f"{folder / MANIFEST}: the bundle does not carry the image {lacking[0]}, which the "
            f"spec's docker hosts run",
            fix="run `pdctl bundle --images` of this spec again",
        )
    missing = sorted(wanted - manifest.requirements())
    if missing:
        raise BundleError(
            f"{folder / MANIFEST}: the bundle does not carry {', '.join(missing)}, which the "
            f"spec installs",
            fix="run `pdctl bundle` of this spec again",
        )

