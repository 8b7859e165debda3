"""The sha256 of the files `pdctl bundle` read before, kept between runs in DIR/.pdctl-hashes.json
and believed while a file's size, modification and change times (ns), inode and device are
unchanged, as git's index believes its entries: a second `pdctl bundle` of an unchanged model
reads none of its gigabytes again. The change time (ctime) is set by the kernel on every write,
rename or metadata change, and nothing but the system clock sets it back, so a file rewritten
with its old modification time put back (`cp -p`, `rsync -a`, `touch -d`), or a new file on a
reused inode, is read again. A file changed less than 2 s before it was read is not recorded,
so one changed again within the same timestamp tick is read next time; pdctl's own copies are
recorded with their source's sha256. `up --bundle` and `preflight --bundle` never use the
record: they read every file (manifest.verify)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from pdctl.offline.manifest import sha256_of

FILE = ".pdctl-hashes.json"
FRESH_NS = 2_000_000_000
Stamp = tuple[int, int, int, int, int]


def stamp(st: os.stat_result) -> Stamp:
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev


class Hashes:
    """What the folder's record says, and what this run hashed (`save` keeps only those)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / FILE
        self.known: dict[str, tuple[Stamp, str]] = {}
        self.used: dict[str, tuple[Stamp, str]] = {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            for key, (st, digest) in data.items():
                size, mtime, ctime, ino, dev = (int(v) for v in st)
                self.known[str(key)] = ((size, mtime, ctime, ino, dev), str(digest))
        except (OSError, ValueError, TypeError, AttributeError):
            self.known = {}  # none yet, or unreadable: every file is hashed

    def of(self, path: Path) -> str:
        """The file's sha256: from the record (this run's, or an earlier run's) while its stamp
        holds, else read."""
        key, st = os.path.abspath(path), path.stat()
        got = self.used.get(key) or self.known.get(key)
        if got is not None and got[0] == stamp(st):
            self.used[key] = got
            return got[1]
        digest = sha256_of(path)
        self.note(path, st, digest)
        return digest

    def note(self, path: Path, st: os.stat_result, digest: str, own: bool = False) -> None:
        """Record `digest` for the file as `st` shows it, unless it changed in the last 2 s
        (`own`: pdctl wrote it, from a source of that sha256, and nothing else did since)."""
        if own or time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) >= FRESH_NS:
            self.used[os.path.abspath(path)] = (stamp(st), digest)

    def copy(self, src: Path, dest: Path) -> None:
        """src to dest (through a temporary name, with the kernel's copy), recorded with src's
        sha256 (from the record while src's stamp holds), so that the copy is not read for its
        record."""
        digest = self.of(src)
        tmp = dest.with_name(f".{dest.name}.tmp")
        shutil.copyfile(src, tmp)
        shutil.copystat(src, tmp)
        os.replace(tmp, dest)
        if self.of_record(src) == digest:  # src unchanged since it was hashed
            self.note(dest, dest.stat(), digest, own=True)

    def of_record(self, path: Path) -> str | None:
        """The sha256 recorded for the file as it is now, or None."""
        got = self.used.get(os.path.abspath(path))
        return got[1] if got is not None and got[0] == stamp(path.stat()) else None

    def save(self) -> None:
        tmp = self.path.with_name(f"{FILE}.tmp")
        tmp.write_text(json.dumps({k: [list(st), d] for k, (st, d) in sorted(self.used.items())}),
                       encoding="utf-8")
        os.replace(tmp, self.path)
