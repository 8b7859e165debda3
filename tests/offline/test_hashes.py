"""`pdctl bundle`'s record of what it hashed (pdctl/offline/hashes.py): a second run over an
unchanged snapshot takes every sha256 from the record (shown here by a source changed behind
an unchanged size and modification time: the record is believed, and `up --bundle`'s own check
still refuses the copy); a changed time, size or file is hashed again; a file changed in the
last 2 s, or an unreadable record, is never believed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from pdctl.offline import manifest as mf
from pdctl.offline.download import bundle
from pdctl.offline.hashes import FILE, Hashes
from tests.helpers import plan_of
from tests.offline.test_bundle import EXAMPLES
from tests.offline.test_weights import SNAPSHOT, snapshot

OLD_NS = time.time_ns() - 3600 * 10**9  # an hour ago: past the 2 s of a fresh file


def aged(folder: Path) -> Path:
    for path in folder.rglob("*"):
        if path.is_file():
            os.utime(path, ns=(OLD_NS, OLD_NS))
    return folder


def rewrite_keeping_stamp(path: Path, data: bytes) -> None:
    """New bytes of the same size, the modification time set back: only a read can tell."""
    st = path.stat()
    assert len(data) == st.st_size
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_second_run_over_an_unchanged_snapshot_takes_every_sha256_from_the_record(tmp_path):
    source = aged(snapshot(tmp_path / "snap"))
    out, said = tmp_path / "bundle", []
    plan = plan_of(EXAMPLES / "phase0-conda.yaml")
    first = bundle(plan, (), "", "", out, said.append, source)
    record = json.loads((out / FILE).read_text())
    # every source and every copy recorded, each copy with its source's modification time
    assert len(record) == 2 * len(SNAPSHOT), sorted(record)
    assert (out / "weights/config.json").stat().st_mtime_ns == OLD_NS
    model = source / "model.safetensors"
    rewrite_keeping_stamp(model, bytes(reversed(SNAPSHOT["model.safetensors"])))
    again = bundle(plan, (), "", "", out, said.append, source)
    assert said[-1] == f"weights from {source}: 0 files copied, 5 already there"
    assert again.files == first.files  # believed: nothing was read
    rewrite_keeping_stamp(out / "weights/config.json", b"x" * len(SNAPSHOT["config.json"]))
    try:
        mf.verify(out)  # what `up --bundle` and `preflight --bundle` run: every file read
    except mf.BundleError as err:
        assert "weights/config.json: sha256 differs from the manifest" in str(err), err
    else:
        raise AssertionError("up --bundle believed the record")
    os.utime(model, ns=(OLD_NS, OLD_NS + 1))  # a changed time: read again, copied
    os.utime(out / "weights/config.json", ns=(OLD_NS, OLD_NS + 1))  # the same in the bundle
    third = bundle(plan, (), "", "", out, said.append, source)
    assert said[-1] == f"weights from {source}: 2 files copied, 3 already there"
    entry = {e.path: e.sha256 for e in third.files}
    assert entry["weights/model.safetensors"] == mf.sha256_of(model)
    assert entry["weights/config.json"] == mf.sha256_of(source / "config.json")
    assert mf.verify(out) == third


def test_a_file_changed_in_the_last_two_seconds_is_hashed_and_not_recorded(tmp_path):
    fresh, old = tmp_path / "fresh.bin", aged_file(tmp_path / "old.bin")
    fresh.write_bytes(b"new")
    hashes = Hashes(tmp_path)
    assert hashes.of(fresh) == mf.sha256_of(fresh) and hashes.of(old) == mf.sha256_of(old)
    hashes.save()
    assert list(json.loads((tmp_path / FILE).read_text())) == [str(old)]


def test_an_unreadable_record_is_read_as_none(tmp_path):
    old = aged_file(tmp_path / "old.bin")
    for text in ("{", '{"x": [[1, 2], "d"]}', '["a"]', '{"k": 5}'):
        (tmp_path / FILE).write_text(text)
        assert Hashes(tmp_path).of(old) == mf.sha256_of(old), text
    (tmp_path / FILE).write_text(json.dumps({str(old): [list(stamp_of(old)), "0" * 64]}))
    assert Hashes(tmp_path).of(old) == "0" * 64  # a well-formed record is believed


def aged_file(path: Path) -> Path:
    path.write_bytes(b"old bytes")
    os.utime(path, ns=(OLD_NS, OLD_NS))
    return path


def stamp_of(path: Path) -> tuple[int, int, int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev
