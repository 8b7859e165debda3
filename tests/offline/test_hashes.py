"""`pdctl bundle`'s record of what it hashed (pdctl/offline/hashes.py): a second run over an
unchanged snapshot reads none of it (the bytes this process read, from /proc/self/io, say so);
a rewrite with the old size and modification time put back is still read again (its change
time moved); a file changed in the last 2 s, or an unreadable record, is never believed; and
`up --bundle`'s own check never uses the record."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from pdctl.offline import hashes as hs
from pdctl.offline import manifest as mf
from pdctl.offline.download import bundle
from pdctl.offline.hashes import FILE, Hashes
from tests.helpers import plan_of
from tests.offline.test_bundle import EXAMPLES
from tests.offline.test_weights import SNAPSHOT, snapshot

BIG = {**SNAPSHOT, "model.safetensors": os.urandom(4 << 20)}  # 4 MiB: reads stand out
OLD_NS = time.time_ns() - 3600 * 10**9  # an hour ago


def read_bytes() -> int:
    """Bytes this process has read so far (rchar: read(2) and its kin, page cache included)."""
    io = dict(ln.split(": ") for ln in Path("/proc/self/io").read_text().splitlines())
    return int(io["rchar"])


def rewrite_keeping_times(path: Path, data: bytes) -> None:
    """New bytes of the same size, the modification time set back (as `cp -p` would)."""
    st = path.stat()
    assert len(data) == st.st_size
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_second_run_over_an_unchanged_snapshot_reads_none_of_it(tmp_path, monkeypatch):
    monkeypatch.setattr(hs, "FRESH_NS", 0)  # the snapshot was just written: believe it at once
    source = snapshot(tmp_path / "snap", BIG)
    out, said = tmp_path / "bundle", []
    plan = plan_of(EXAMPLES / "phase0-conda.yaml")
    before = read_bytes()
    first = bundle(plan, (), "", "", out, said.append, source)
    assert read_bytes() - before > 4 << 20  # the sources were hashed
    record = json.loads((out / FILE).read_text())
    assert len(record) == 2 * len(BIG), sorted(record)  # every source and every copy
    before = read_bytes()
    again = bundle(plan, (), "", "", out, said.append, source)
    assert read_bytes() - before < 1 << 20, "a second run read the snapshot again"
    assert said[-1] == f"weights from {source}: 0 files copied, 5 already there"
    assert again.files == first.files
    # the same size and modification time, other bytes: the change time tells
    model = source / "model.safetensors"
    rewrite_keeping_times(model, bytes(reversed(BIG["model.safetensors"])))
    third = bundle(plan, (), "", "", out, said.append, source)
    assert said[-1] == f"weights from {source}: 1 files copied, 4 already there"
    entry = {e.path: e.sha256 for e in third.files}
    assert entry["weights/model.safetensors"] == mf.sha256_of(model)
    assert mf.verify(out) == third


def test_up_bundle_reads_every_file_whatever_the_record_says(tmp_path, monkeypatch):
    monkeypatch.setattr(hs, "FRESH_NS", 0)
    out = tmp_path / "bundle"
    bundle(plan_of(EXAMPLES / "phase0-conda.yaml"), (), "", "", out, lambda _: None,
           snapshot(tmp_path / "snap"))
    copy = out / "weights/config.json"
    record = json.loads((out / FILE).read_text())
    st = copy.stat()  # the record made to say the damaged copy below is the good one
    copy.write_bytes(b"x" * st.st_size)
    st = copy.stat()
    key = str(copy)
    record[key] = [[st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev],
                   record[key][1]]
    (out / FILE).write_text(json.dumps(record))
    assert Hashes(out).of(copy) == record[key][1]  # believed by `pdctl bundle`
    with pytest.raises(mf.BundleError, match="weights/config.json: sha256 differs"):
        mf.verify(out)  # what `up --bundle` and `preflight --bundle` run


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
    (tmp_path / FILE).write_text(json.dumps({str(old): [list(hs.stamp(old.stat())), "0" * 64]}))
    assert Hashes(tmp_path).of(old) == "0" * 64  # a well-formed record is believed


def aged_file(path: Path) -> Path:
    """A file last changed over 2 s ago (its change time too: it is waited for)."""
    path.write_bytes(b"old bytes")
    time.sleep(max(0.0, (hs.FRESH_NS - (time.time_ns() - path.stat().st_ctime_ns)) / 1e9))
    return path
