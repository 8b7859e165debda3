"""`pdctl render --output-dir DIR` on a real filesystem: it writes and removes only pdctl's own
files."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path

import pytest

from pdctl.render.bundle import folder_changes, parse_folder_manifest
from tests.conftest import ROOT
from tests.helpers import run_cli, written

SPEC = (ROOT / "examples" / "phase0-docker.yaml").read_text()
SERVE = "hosts/gpu-a/qwen-docker-serve-{}/start.sh"


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = written(tmp_path / "spec.yaml", SPEC)
    return path


def render(spec: Path, out: Path | str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code, stdout, err = run_cli(["render", str(spec), "--output-dir", str(out)], capsys)
    assert stdout == ""
    return code, err


def refused(spec: Path, out: Path | str, capsys: pytest.CaptureFixture[str], phrase: str) -> None:
    code, err = render(spec, out, capsys)
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and phrase in err, err


def listed(out: Path) -> dict[str, dict[str, str]]:
    return json.loads((out / ".pdctl-manifest").read_text())["files"]


def tree(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): p.read_text()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def test_files_pdctl_did_not_write_survive_a_rerender(spec: Path, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert render(spec, out, capsys)[0] == 0
    (out / "NOTES.md").write_text("my notes\n")
    (out / ".ssh").mkdir(mode=0o700)
    (out / ".ssh" / "id_rsa").write_text("PRIVATE KEY\n")
    (out / "hosts" / "gpu-a" / "README").write_text("mine\n")
    assert render(spec, out, capsys)[0] == 0
    assert (out / "NOTES.md").read_text() == "my notes\n"
    assert (out / ".ssh" / "id_rsa").read_text() == "PRIVATE KEY\n"
    assert (out / "hosts" / "gpu-a" / "README").read_text() == "mine\n"
    assert (out / SERVE.format(1)).is_file()


def test_files_the_new_bundle_drops_are_removed_and_only_those(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert render(spec, out, capsys)[0] == 0
    (out / "hosts" / "gpu-a" / "qwen-docker-serve-1" / "notes.txt").write_text("keep\n")
    spec.write_text(SPEC.replace("replicas: 2", "replicas: 1"))
    code, err = render(spec, out, capsys)
    assert code == 0 and "removed 2 it no longer writes" in err
    assert not (out / SERVE.format(1)).exists()
    assert (out / "hosts" / "gpu-a" / "qwen-docker-serve-1" / "notes.txt").read_text() == "keep\n"
    assert (out / SERVE.format(0)).is_file()
    assert list(listed(out)) == [
        "hosts/gpu-a/qwen-docker-serve-0/start.sh", "hosts/gpu-a/qwen-docker-serve-0/stop.sh",
    ]


def test_a_folder_emptied_by_the_removal_goes_too(spec: Path, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert render(spec, out, capsys)[0] == 0
    spec.write_text(SPEC.replace("replicas: 2", "replicas: 1"))
    assert render(spec, out, capsys)[0] == 0
    assert not (out / "hosts" / "gpu-a" / "qwen-docker-serve-1").exists()


def test_a_file_pdctl_did_not_write_where_it_would_write_one_is_refused(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    spec.write_text(SPEC.replace("replicas: 2", "replicas: 1"))
    assert render(spec, out, capsys)[0] == 0
    mine = out / SERVE.format(1)
    mine.parent.mkdir(parents=True)
    mine.write_text("the user's own script\n")
    before = tree(out)
    spec.write_text(SPEC)
    refused(spec, out, capsys, "pdctl did not write it")
    assert tree(out) == before


def test_an_older_bundle_without_a_list_keeps_every_file_it_does_not_rewrite(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    (out / "hosts" / "gpu-a" / "qwen-docker-serve-0").mkdir(parents=True)
    (out / ".pdctl-bundle").write_text("qwen-docker\n")  # what pdctl wrote before the list
    (out / SERVE.format(0)).write_text("old script\n")
    (out / "hosts" / "gpu-a" / "gone.sh").write_text("maybe pdctl's, maybe not\n")
    (out / "NOTES.md").write_text("notes\n")
    code, err = render(spec, out, capsys)
    assert code == 0 and "kept 2 other files" in err, err
    assert (out / SERVE.format(0)).read_text() != "old script\n"
    assert (out / "hosts" / "gpu-a" / "gone.sh").read_text() == "maybe pdctl's, maybe not\n"
    assert (out / "NOTES.md").read_text() == "notes\n"
    assert "hosts/gpu-a/gone.sh" not in listed(out) and not (out / ".pdctl-bundle").exists()


def test_a_symlinked_output_folder_is_refused(spec: Path, tmp_path, capsys) -> None:
    real = tmp_path / "real"
    assert render(spec, real, capsys)[0] == 0
    (real / "NOTES.md").write_text("notes\n")
    before = tree(real)
    link = tmp_path / "link"
    link.symlink_to(real)
    refused(spec, link, capsys, "is a symbolic link")
    assert tree(real) == before
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    refused(spec, dangling, capsys, "is a symbolic link")
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("where", [".", "cwd", "parent", "home", "/"])
def test_the_working_folder_its_parents_home_and_root_are_refused(
    where: str, spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / ".pdctl-bundle").write_text("qwen-docker\n")  # even one that looks like a bundle
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    out = {".": ".", "cwd": str(work), "parent": str(tmp_path), "home": str(home), "/": "/"}
    phrase = {
        ".": "the working folder", "cwd": "the working folder", "parent": "a parent of",
        "home": "your home folder", "/": "the root folder",
    }
    refused(spec, out[where], capsys, phrase[where])
    assert sorted(os.listdir(work)) == [".pdctl-bundle"] and os.listdir(home) == []


def test_a_symlinked_marker_is_not_followed(spec: Path, tmp_path, capsys) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "owner").write_text("qwen-docker\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".pdctl-bundle").symlink_to(elsewhere / "owner")
    (out / "keep.txt").write_text("keep\n")
    refused(spec, out, capsys, ".pdctl-bundle is a symbolic link")
    assert (elsewhere / "owner").read_text() == "qwen-docker\n"
    assert sorted(os.listdir(out)) == [".pdctl-bundle", "keep.txt"]


def test_a_symlinked_or_planted_file_list_removes_nothing_outside(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("precious\n")
    out = tmp_path / "out"
    assert render(spec, out, capsys)[0] == 0
    files = out / ".pdctl-manifest"
    doc = json.loads(files.read_text())
    # A list naming a path outside the folder is refused before anything changes.
    files.write_text(json.dumps({**doc, "files": {"../victim/precious": {}}}))
    refused(spec, out, capsys, "the list of pdctl's files is damaged")
    # A list that is a link is not read.
    files.unlink()
    (victim / "list").write_text(json.dumps({**doc, "files": {"precious": {}}}))
    files.symlink_to(victim / "list")
    refused(spec, out, capsys, ".pdctl-manifest is a symbolic link")
    # A listed file behind a symlinked folder inside the bundle is not removed through it.
    files.unlink()
    files.write_text(json.dumps({**doc, "files": {**doc["files"], "sub/precious": {}}}))
    (out / "sub").symlink_to(victim)
    assert render(spec, out, capsys)[0] == 0
    assert (victim / "precious").read_text() == "precious\n"
    assert (out / "sub").is_symlink()


def test_a_symlinked_folder_where_pdctl_writes_is_refused(spec: Path, tmp_path, capsys) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "hosts").symlink_to(victim)
    (out / ".pdctl-bundle").write_text("qwen-docker\n")
    refused(spec, out, capsys, "is a symbolic link or a file where pdctl writes a folder")
    assert os.listdir(victim) == []


def stage(out: Path, name: str) -> Path:
    """A staging folder a killed render left (`.pdctl-render` is its marker)."""
    folder = out / f".pdctl-render-{name}"
    (folder / "hosts").mkdir(parents=True)
    (folder / "hosts" / "start.sh").write_text("half written")
    (folder / ".pdctl-render").write_text("pdctl-render 123 a-host\n")
    return folder


def test_staging_folders_of_killed_runs_are_removed_and_no_other(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert render(spec, out, capsys)[0] == 0
    dead, empty = stage(out, "dead0000"), out / ".pdctl-render-empty000"
    empty.mkdir()
    unmarked = out / ".pdctl-render-mine0000"
    unmarked.mkdir()
    (unmarked / "data").write_text("not pdctl's\n")
    code, err = render(spec, out, capsys)
    assert code == 0, err
    assert not dead.exists() and not empty.exists() and f"removed {dead}" in err
    assert (unmarked / "data").read_text() == "not pdctl's\n"


def test_a_killed_run_in_a_new_folder_does_not_block_the_next(spec: Path, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    stage(out, "dead0000")
    assert render(spec, out, capsys)[0] == 0
    assert sorted(os.listdir(out)) == [".pdctl-manifest", "hosts"]


def test_a_render_already_writing_the_folder_stops_the_second(spec: Path, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert render(spec, out, capsys)[0] == 0
    live = stage(out, "live0000")  # the running render's staging folder
    before = tree(out)
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        code, err = render(spec, out, capsys)
    finally:
        os.close(fd)
    assert code == 1 and "another pdctl render is writing this folder" in err
    assert len(err.splitlines()) == 1
    assert tree(out) == before and live.is_dir()


def test_a_new_folder_gets_exactly_the_bundle_and_its_manifest(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "deep" / "out"
    assert render(spec, out, capsys)[0] == 0
    scripts = [SERVE.format(i).replace("start", name) for i in (0, 1) for name in ("start", "stop")]
    assert sorted(tree(out)) == [".pdctl-manifest", *scripts]
    assert os.access(out / SERVE.format(0), os.X_OK)
    assert out.stat().st_mode & 0o777 == 0o755
    doc = json.loads((out / ".pdctl-manifest").read_text())
    assert doc["deployment"] == "qwen-docker" and doc["pdctl"]
    for path in scripts:
        data = (out / path).read_bytes()
        mode = f"{(out / path).stat().st_mode & 0o777:04o}"
        assert doc["files"][path] == {"sha256": hashlib.sha256(data).hexdigest(), "mode": mode}


def test_a_failure_half_way_leaves_the_previous_render_and_no_staging_folder(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert render(spec, out, capsys)[0] == 0
    (out / SERVE.format(1)).unlink()  # a folder where the last file pdctl writes goes
    (out / SERVE.format(1)).mkdir()
    (out / SERVE.format(1) / "x").write_text("x\n")
    before = tree(out)
    spec.write_text(SPEC.replace("maxNumSeqs: 256", "maxNumSeqs: 128"))  # new scripts
    refused(spec, out, capsys, "is a folder where pdctl writes a file (nothing was changed)")
    assert tree(out) == before
    assert sorted(os.listdir(out)) == [".pdctl-manifest", "hosts"]


def test_a_folder_of_the_previous_pdctl_version_is_updated_cleanly(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    (out / "hosts" / "gpu-a" / "old-serve").mkdir(parents=True)
    (out / ".pdctl-bundle").write_text("qwen-docker\n")
    (out / ".pdctl-files").write_text("# list\nhosts/gpu-a/old-serve/start.sh\n")
    (out / "hosts" / "gpu-a" / "old-serve" / "start.sh").write_text("old\n")
    (out / "NOTES.md").write_text("notes\n")
    code, err = render(spec, out, capsys)
    assert code == 0 and "removed 1 it no longer writes" in err, err
    assert sorted(os.listdir(out)) == [".pdctl-manifest", "NOTES.md", "hosts"]
    assert not (out / "hosts" / "gpu-a" / "old-serve").exists() and len(listed(out)) == 4
    (out / ".pdctl-bundle").write_text("qwen-docker\n")  # a stray marker never wins over it
    (out / ".pdctl-manifest").write_text(json.dumps({"deployment": "x", "files": {}}))
    refused(spec, out, capsys, "holds the bundle of deployment 'x'")


def test_what_to_remove_and_what_is_not_pdctls_without_a_filesystem() -> None:
    assert folder_changes(["a", "b/c"], ["a", "d"], ["a", "d"]) == (["b/c"], ["d"])
    assert folder_changes(None, ["a"], ["a", "z"]) == ([], [])
    assert parse_folder_manifest('{"deployment": "x", "files": {"a/b": {}}}') == ("x", {"a/b": {}})
    for bad in ('{"files": {}}', "[1]", '{"deployment": "x", "files": {"/etc/x": {}}}', "{"):
        with pytest.raises(ValueError):
            parse_folder_manifest(bad)
