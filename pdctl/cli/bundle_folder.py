"""`pdctl render --output-dir DIR`: write a bundle into a folder, never touching files pdctl
did not write.

The folder holds two files of pdctl's own: `.pdctl-bundle` (the deployment's name) and
`.pdctl-files` (every file the last render wrote there). A render

- refuses a DIR that is a symbolic link, `/`, your home folder, the working folder, or a parent
  of one of these; writes only into a new or empty folder or one whose `.pdctl-bundle` names the
  same deployment; never follows a `.pdctl-bundle` or `.pdctl-files` that is a link, nor a link
  inside the folder (every step goes through folder descriptors opened with O_NOFOLLOW);
- replaces only files listed in `.pdctl-files` and removes only those it no longer writes; a
  file it did not write where it would write one is an error. A bundle written by an older pdctl
  has no list: then files at the paths this render writes are replaced (the older pdctl wrote
  them) and nothing else is removed;
- stages every file in `DIR/.pdctl-render-XXXXXXXX` first (a failure there changes nothing),
  then widens `.pdctl-files` to old + new, renames each file into place (each file is replaced
  whole), removes the dropped ones and writes the final list: a run killed half-way leaves a
  folder whose list still names every file pdctl wrote, and the next render finishes the job;
- removes staging folders of killed runs: only ones carrying pdctl's `.pdctl-render` marker,
  owned by this user, whose process is gone or that are older than an hour.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pdctl.errors import PdctlError, UsageError
from pdctl.render.bundle import Bundle, manifest, parse_manifest

MARKER = ".pdctl-bundle"
FILES = ".pdctl-files"
STAGE_PREFIX = ".pdctl-render-"
STAGE_MARKER = ".pdctl-render"
STALE_SECONDS = 3600
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Written:
    files: int
    removed: int
    kept_unlisted: int  # files an older pdctl's bundle (no list) left that this render kept


def refuse_place(out: Path) -> None:
    """A usage error for a DIR no bundle should go into."""
    if out.is_symlink():
        raise UsageError(
            f"--output-dir {out} is a symbolic link; pdctl does not write through links",
            fix="give the folder it points to, or a new folder",
        )
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output-dir {out} is a file, not a folder", fix="choose a folder")
    real = Path(os.path.realpath(out))
    places = [(Path(os.path.realpath(os.path.expanduser("~"))), "your home folder")]
    try:
        places.append((Path(os.path.realpath(os.getcwd())), "the working folder"))
    except OSError:
        pass
    if real == Path(real.anchor):
        what = "the root folder"
    else:
        what = next(
            (
                name if real == place else f"a parent of {name}"
                for place, name in places
                if real == place or real in place.parents
            ),
            "",
        )
    if what:
        raise UsageError(
            f"--output-dir {out} is {what}; a bundle goes into a folder of its own",
            fix="name a new folder, e.g. -o ./bundle",
        )


def write(bundle: Bundle, name: str, out: Path, say: Callable[[str], None]) -> Written:
    """Write `bundle` (deployment `name`) into the folder `out` (see the module notes)."""
    refuse_place(out)
    created = False
    try:
        if not os.path.lexists(out):
            out.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(out, 0o755)
            created = True
        root = os.open(out, _DIR)
    except OSError as exc:
        raise PdctlError(f"cannot write {out}: {exc.strerror or exc}") from None
    started = False  # the commit began: files may have moved
    try:
        _lock(root, out)
        _remove_stale_stages(root, out, say)
        old = _previous(root, out, name)
        paths = bundle.paths()
        _check_targets(root, out, paths, old)
        stage = _stage(root, bundle, name, old)
        try:
            started = True
            _commit(root, stage, out, paths, old)
        finally:
            try:
                _rmtree(root, stage)
            except OSError:
                pass
        kept = _count_unlisted(out, paths) if old is None else 0
        return Written(len(paths), len(set(old or ()) - set(paths)), kept)
    except OSError as exc:
        more = "; run render again to finish" if started else " (nothing was changed)"
        raise PdctlError(f"cannot write {out}: {exc.strerror or exc}{more}") from None
    finally:
        os.close(root)
        if created and not started:
            try:
                os.rmdir(out)
            except OSError:
                pass


def _lock(root: int, out: Path) -> None:
    try:
        fcntl.flock(root, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise PdctlError(
            f"{out}: another pdctl render is writing this folder now; try again "
            "when it has finished"
        ) from None
    except OSError:
        pass  # a filesystem without locks (some network mounts): write unlocked


def _walk(root: int, parts: list[str], out: Path, create: bool = False) -> int | None:
    """A descriptor of the folder root/parts (the caller closes it), never through a link;
    None when a part does not exist (and `create` is false)."""
    fd = os.dup(root)
    try:
        for i, part in enumerate(parts):
            try:
                nxt = os.open(part, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                where = "/".join(parts[: i + 1])
                raise UsageError(
                    f"{out}/{where} is a symbolic link or a file where pdctl writes a folder",
                    fix="remove it, or choose another folder",
                ) from None
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _read_own(root: int, name: str, out: Path) -> str | None:
    """The text of pdctl's own file `name` in the folder; None when there is none."""
    try:
        fd = os.open(name, _READ, dir_fd=root)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise UsageError(
            f"{out}/{name} is a symbolic link; pdctl does not follow it",
            fix="remove the link, or choose another folder",
        ) from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"{out}/{name} is not a file", fix="choose another folder")
        return fh.read(16 << 20).decode("utf-8", "replace")


def _previous(root: int, out: Path, name: str) -> tuple[str, ...] | None:
    """The files the previous render wrote: () for an empty folder, None for a bundle of an
    older pdctl (a marker without a list)."""
    owner = _read_own(root, MARKER, out)
    if owner is None:
        others = [
            e
            for e in os.listdir(root)
            if not (e.startswith(STAGE_PREFIX) and _stage_owner(root, e))
        ]
        if others:
            raise UsageError(
                f"--output-dir {out} exists and is not a pdctl bundle folder",
                fix="choose an empty or new folder",
            )
        return ()
    owner = owner.strip()
    if owner != name:
        raise UsageError(
            f"--output-dir {out} holds the bundle of deployment {owner!r}, not {name!r}",
            fix="choose another folder, or remove that one first",
        )
    text = _read_own(root, FILES, out)
    if text is None:
        return None
    try:
        return parse_manifest(text)
    except ValueError as exc:
        raise UsageError(
            f"{out}/{FILES}: {exc}: the list of pdctl's files is damaged",
            fix="delete that file (then pdctl removes nothing) and render again",
        ) from None


def _check_targets(root: int, out: Path, paths: list[str], old: tuple[str, ...] | None) -> None:
    """Refuse before anything changes: a folder or a file pdctl did not write where it writes."""
    known = None if old is None else set(old)
    for path in paths:
        *parents, leaf = path.split("/")
        fd = _walk(root, parents, out)
        if fd is None:
            continue
        try:
            st = os.stat(leaf, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        finally:
            os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(
                f"{out}/{path} is a folder where pdctl writes a file",
                fix="move it away, or choose another folder",
            )
        if known is not None and path not in known:
            raise UsageError(
                f"{out}/{path} exists and pdctl did not write it (it is not in {FILES})",
                fix="move it away, or choose another folder",
            )


def _write_file(root: int, path: str, text: str, mode: int, out: Path) -> None:
    *parents, leaf = path.split("/")
    fd = _walk(root, parents, out, create=True)
    assert fd is not None
    try:
        f = os.open(leaf, _CREATE, mode, dir_fd=fd)
    finally:
        os.close(fd)
    with os.fdopen(f, "wb") as fh:
        os.fchmod(f, mode)
        fh.write(text.encode("utf-8"))


def _stage(root: int, bundle: Bundle, name: str, old: tuple[str, ...] | None) -> str:
    """A staging folder in the bundle folder holding every file of the new bundle."""
    for _ in range(100):
        stage = STAGE_PREFIX + secrets.token_hex(4)
        try:
            os.mkdir(stage, 0o700, dir_fd=root)
            break
        except FileExistsError:
            continue
    fd = _walk(root, [stage], Path("."))
    assert fd is not None
    try:
        here = Path(stage)
        _write_file(
            fd, STAGE_MARKER, f"pdctl-render {os.getpid()} {socket.gethostname()}\n", 0o600, here
        )
        for artifact in bundle:
            _write_file(
                fd, artifact.path, artifact.text, 0o755 if artifact.executable else 0o644, here
            )
        _write_file(fd, MARKER, f"{name}\n", 0o644, here)
        _write_file(fd, FILES, manifest(bundle.paths()), 0o644, here)
        _write_file(fd, FILES + ".all", manifest([*bundle.paths(), *(old or ())]), 0o644, here)
    finally:
        os.close(fd)
    return stage


def _move(root: int, stage: str, src: str, dst: str, out: Path) -> None:
    *sparents, sleaf = [stage, *src.split("/")]
    *dparents, dleaf = dst.split("/")
    sfd = _walk(root, sparents, out)
    dfd = _walk(root, dparents, out, create=True)
    assert sfd is not None and dfd is not None
    try:
        os.rename(sleaf, dleaf, src_dir_fd=sfd, dst_dir_fd=dfd)
    finally:
        os.close(sfd)
        os.close(dfd)


def _commit(
    root: int, stage: str, out: Path, paths: list[str], old: tuple[str, ...] | None
) -> None:
    _move(root, stage, MARKER, MARKER, out)
    _move(root, stage, FILES + ".all", FILES, out)
    for path in paths:
        _move(root, stage, path, path, out)
    for path in sorted(set(old or ()) - set(paths)):
        _remove(root, path, out)
    _move(root, stage, FILES, FILES, out)


def _remove(root: int, path: str, out: Path) -> None:
    """Remove a file of the previous bundle, then the folders that removal left empty. A link
    on the way is left alone (the file is not where pdctl wrote it)."""
    parts = path.split("/")
    try:
        fd = _walk(root, parts[:-1], out)
    except UsageError:
        return
    if fd is None:
        return
    try:
        if stat.S_ISDIR(os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode):
            return
        os.unlink(parts[-1], dir_fd=fd)
    except FileNotFoundError:
        return
    finally:
        os.close(fd)
    for depth in range(len(parts) - 1, 0, -1):
        fd = _walk(root, parts[: depth - 1], out)
        if fd is None:
            return
        try:
            os.rmdir(parts[depth - 1], dir_fd=fd)
        except OSError:
            return
        finally:
            os.close(fd)


def _rmtree(parent: int, name: str) -> None:
    """Remove the folder parent/name and everything in it, never following a link."""
    fd = os.open(name, _DIR, dir_fd=parent)
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    _rmtree(fd, entry.name)
                else:
                    os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _stage_owner(root: int, entry: str) -> tuple[int, str, float] | None:
    """(pid, host, started) of a staging folder pdctl made; None for anything else."""
    try:
        st = os.stat(entry, dir_fd=root, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            return None
        fd = os.open(entry, _DIR, dir_fd=root)
        try:
            mfd = os.open(STAGE_MARKER, _READ, dir_fd=fd)
        finally:
            os.close(fd)
        with os.fdopen(mfd, "rb") as fh:
            mst = os.fstat(mfd)
            if not stat.S_ISREG(mst.st_mode):
                return None
            words = fh.read(512).decode("utf-8", "replace").split()
    except OSError:
        return None
    if len(words) != 3 or words[0] != "pdctl-render" or not words[1].isdigit():
        return None
    return int(words[1]), words[2], mst.st_mtime


def _alive(pid: int, host: str) -> bool:
    if host != socket.gethostname():
        return True  # another machine's (or container's) process: only its age tells
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_stages(root: int, out: Path, say: Callable[[str], None]) -> None:
    now = time.time()
    for entry in os.listdir(root):
        if not entry.startswith(STAGE_PREFIX):
            continue
        owner = _stage_owner(root, entry)
        if owner is None:
            continue
        pid, host, started = owner
        if _alive(pid, host) and now - started < STALE_SECONDS:
            continue
        _rmtree(root, entry)
        say(f"removed {out}/{entry}, left by a pdctl render that did not finish (pid {pid})")


def _count_unlisted(out: Path, paths: list[str]) -> int:
    """Files in the folder that are not pdctl's (after a bundle of an older pdctl)."""
    mine = {*paths, MARKER, FILES}
    count = 0
    for top, dirs, files in os.walk(out):
        rel = os.path.relpath(top, out)
        dirs[:] = [d for d in dirs if not (rel == "." and d.startswith(STAGE_PREFIX))]
        for f in files:
            if os.path.normpath(os.path.join(rel, f)) not in mine:
                count += 1
    return count
