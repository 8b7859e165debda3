"""`pdctl render --output-dir DIR`: write a bundle into a folder, never touching files pdctl
did not write (docs/security.md). `.pdctl-manifest` (render/bundle.py) lists what it wrote. The
bundle is written into `DIR/.pdctl-render-XXXX` first, then every file is renamed into place (the
old one aside) and the manifest last; a failure renames everything back. A folder of an older
pdctl (`.pdctl-bundle`, `.pdctl-files`) is read and updated."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdctl import __version__
from pdctl.cli.report_file import cannot_write
from pdctl.errors import PdctlError, UsageError
from pdctl.render.bundle import (
    MANIFEST,
    Bundle,
    folder_changes,
    folder_manifest,
    parse_folder_manifest,
    parse_manifest,
)

MARKER, FILES = ".pdctl-bundle", ".pdctl-files"  # an older pdctl's: the name, the file list
STAGE, STAGE_MARKER = ".pdctl-render-", ".pdctl-render"
MOVE = "move it away, or choose another folder"
_MOVE_ASIDE = ".pdctl-old-"


def _no(what: str, fix: str = MOVE) -> UsageError:
    return UsageError(what, fix=fix)


@dataclass
class Written:
    files: int
    removed: int
    kept_unlisted: int  # files an older pdctl's bundle (no list) left that this render kept


def refuse_place(out: Path) -> None:
    """A usage error for a DIR no bundle should go into."""
    if out.is_symlink():
        raise _no(f"--output-dir {out} is a symbolic link; pdctl does not write through links",
                  "give the folder it points to, or a new folder")
    if out.exists() and not out.is_dir():
        raise _no(f"--output-dir {out} is a file, not a folder", "choose a folder")
    real = Path(os.path.realpath(out))
    what = "the root folder" if real == Path(real.anchor) else ""
    for where, name in (("~", "your home folder"), (".", "the working folder")):
        with contextlib.suppress(OSError):
            place = Path(os.path.realpath(os.path.expanduser(where)))
            if not what and (real == place or real in place.parents):
                what = name if real == place else f"a parent of {name}"
    if what:
        raise _no(f"--output-dir {out} is {what}; a bundle goes into a folder of its own",
                  "name a new folder, e.g. -o ./bundle")


def write(bundle: Bundle, name: str, out: Path, say: Callable[[str], None]) -> Written:
    """Write `bundle` (deployment `name`) into the folder `out` (see the module notes)."""
    refuse_place(out)
    created = not os.path.lexists(out)
    try:
        if created:
            out.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(out, 0o755)
        root = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise cannot_write("--output-dir", out, exc) from None
    stage = None
    try:
        if _lock(root, out):
            for entry in sorted(e for e in os.listdir(out) if _is_stage(out, e)):
                shutil.rmtree(out / entry)
                say(f"removed {out}/{entry}, left by a pdctl render that did not finish")
        owner, old = _previous(out)
        if owner not in (None, name):
            raise _no(f"--output-dir {out} holds the bundle of deployment {owner!r}, not {name!r}",
                      "choose another folder, or remove that one first")
        paths = bundle.paths()
        for where in filter(None, (_blocked(out, p) for p in paths)):
            raise _no(f"{out}/{where} is a symbolic link or a file where pdctl writes a folder")
        present = [p for p in paths if os.path.lexists(out / p)]
        drop, foreign = folder_changes(None if old is None else list(old), paths, present)
        for path in foreign:
            raise _no(f"{out}/{path} exists and pdctl did not write it (not in {MANIFEST})")
        drop = [p for p in drop if _blocked(out, p) is None and _is_file(out / p)]
        legacy = [f for f in (MARKER, FILES) if _is_file(out / f)]
        new = folder_manifest(bundle, name, __version__)
        wide = {**new, "files": {**(old or {}), **new["files"]}}
        stage = Path(tempfile.mkdtemp(prefix=STAGE, dir=out))
        _put(stage / STAGE_MARKER, "pdctl-render\n", 0o600)
        _put(stage / MANIFEST, json.dumps(new, indent=1) + "\n", 0o644)
        _put(stage / (MANIFEST + ".all"), json.dumps(wide, indent=1) + "\n", 0o644)
        for artifact in bundle:
            _put(stage / artifact.path, artifact.text, 0o755 if artifact.executable else 0o644)
        moves: list[tuple[str, str | None]] = [(MANIFEST, MANIFEST + ".all")]
        moves += [(p, p) for p in paths]
        moves += [(p, None) for p in drop + legacy] + [(MANIFEST, MANIFEST)]
        try:
            _commit(out, stage, moves)
        except _Stuck:
            stage = None  # it holds files pdctl could not put back
            raise
        for parent in (out / q for p in drop for q in Path(p).parents[:-1]):
            with contextlib.suppress(OSError):
                parent.rmdir()  # the folders the removal left empty
        kept = _count_unlisted(out, paths) if old is None and legacy else 0
        return Written(len(paths), len(drop), kept)
    except OSError as exc:
        raise PdctlError(f"cannot write {out}: {exc.strerror} (nothing was changed)") from None
    finally:
        os.close(root)
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        if created and not os.path.lexists(out / MANIFEST):
            with contextlib.suppress(OSError):
                out.rmdir()


class _Stuck(PdctlError):
    """A failed render that could not put every file back."""


def _lock(root: int, out: Path) -> bool:
    """Lock the folder against another render; False where the filesystem has no locks (some
    network mounts: write unlocked, and leave other staging folders be)."""
    try:
        fcntl.flock(root, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        raise PdctlError(f"{out}: another pdctl render is writing this folder now") from None
    except OSError:
        return False


def _is_file(path: Path) -> bool:
    """A file or a link (not followed) at `path`."""
    return os.path.lexists(path) and not stat.S_ISDIR(os.lstat(path).st_mode)


def _is_stage(out: Path, entry: str) -> bool:
    """A render's staging folder: named so, this user's, empty or holding pdctl's marker."""
    with contextlib.suppress(OSError):
        st, inside = os.lstat(out / entry), os.listdir(out / entry)
        mine = entry.startswith(STAGE) and st.st_uid == os.geteuid() and stat.S_ISDIR(st.st_mode)
        return mine and (not inside or os.path.isfile(out / entry / STAGE_MARKER))
    return False


def _read_own(out: Path, name: str) -> str | None:
    """The text of pdctl's own file `name` in the folder; None when there is none."""
    if (out / name).is_symlink():
        raise _no(f"{out}/{name} is a symbolic link; pdctl does not follow it")
    if not os.path.lexists(out / name):
        return None
    if not (out / name).is_file():
        raise _no(f"{out}/{name} is not a file")
    return (out / name).read_text(errors="replace")


def _previous(out: Path) -> tuple[str | None, dict[str, Any] | None]:
    """(deployment, {path: entry} of the files the previous render wrote); (None, {}) for an
    empty folder."""
    text, name = _read_own(out, MANIFEST), MANIFEST
    owner = None if text is not None else _read_own(out, MARKER)
    if text is None and owner is None:
        if [e for e in os.listdir(out) if not _is_stage(out, e)]:
            raise _no(f"--output-dir {out} exists and is not a pdctl bundle folder",
                      "choose an empty or new folder")
        return None, {}
    try:
        if text is not None:
            return parse_folder_manifest(text)
        text, name = _read_own(out, FILES), FILES  # None: an older pdctl's bundle without a list
        return str(owner).strip(), None if text is None else dict.fromkeys(parse_manifest(text))
    except ValueError as exc:
        raise _no(f"{out}/{name}: {exc}: the list of pdctl's files is damaged",
                  "move the folder away and render again") from None


def _blocked(out: Path, path: str) -> str | None:
    """The first folder on the way to `path` that is a link or a file; None when none is."""
    folders = [str(p) for p in reversed(Path(path).parents[:-1])]
    return next((f for f in folders if _is_file(out / f)), None)


def _put(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fd, mode)
        fh.write(text.encode("utf-8"))


def _commit(out: Path, stage: Path, moves: list[tuple[str, str | None]]) -> None:
    """Rename each staged file over its path (None: move the old one aside); the old file is
    kept aside in the staging folder first; on an error, rename everything back."""
    done: list[tuple[Path, Path]] = []
    made: list[Path] = []
    path = ""
    try:
        for i, (path, staged) in enumerate(moves):
            target = out / path
            if _is_file(target):  # kept aside: a second link (no moment without it) or moved
                aside = stage / f"{_MOVE_ASIDE}{i}"
                with contextlib.suppress(OSError):
                    if staged:
                        os.link(target, aside, follow_symlinks=False)
                if not os.path.lexists(aside):
                    target.rename(aside)
                done.append((target, aside))
            if staged is not None:
                for parent in reversed(target.relative_to(out).parents[:-1]):
                    if not os.path.lexists(out / parent):
                        os.mkdir(out / parent, 0o755)
                        made.append(out / parent)
                os.rename(stage / staged, target)
                done.append((stage / staged, target))
    except OSError as exc:
        try:
            for src, dst in reversed(done):
                os.rename(dst, src)
            for folder in reversed(made):
                os.rmdir(folder)
        except OSError as undo:
            raise _Stuck(
                f"cannot write {out}/{path}: {exc.strerror}, nor put back the files pdctl moved "
                f"aside ({undo.strerror}): they are in {stage}") from None
        if exc.errno == errno.EISDIR:
            raise _no(f"{out}/{path} is a folder where pdctl writes a file (nothing was changed)",
                      "move it away, or choose another folder") from None
        raise


def _count_unlisted(out: Path, paths: list[str]) -> int:
    """Files in the folder that are not pdctl's (after a bundle of an older pdctl)."""
    mine = {*paths, MANIFEST}
    rel = [p.relative_to(out) for p in out.rglob("*") if not p.is_dir()]
    return sum(str(p) not in mine and not p.parts[0].startswith(STAGE) for p in rel)
