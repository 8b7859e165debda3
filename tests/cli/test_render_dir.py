"""`pdctl render --output-dir DIR` on a real filesystem: it writes and removes only pdctl's own
files."""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers import run_cli

SPEC = (ROOT / "examples" / "phase0-docker.yaml").read_text()
SERVE = "hosts/gpu-a/qwen-docker-serve-{}/start.sh"


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return path


def render(spec: Path, out: Path | str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code, stdout, err = run_cli(["render", str(spec), "--output-dir", str(out)], capsys)
    assert stdout == ""
    return code, err


def refused(spec: Path, out: Path | str, capsys: pytest.CaptureFixture[str], phrase: str) -> None:
    code, err = render(spec, out, capsys)
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and phrase in err, err


def tree(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): p.read_text()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def test_files_pdctl_did_not_write_survive_a_rerender(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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
    listed = (out / ".pdctl-files").read_text().splitlines()[1:]
    assert listed == [
        "hosts/gpu-a/qwen-docker-serve-0/start.sh",
        "hosts/gpu-a/qwen-docker-serve-0/stop.sh",
    ]


def test_a_folder_emptied_by_the_removal_goes_too(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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
    assert "hosts/gpu-a/gone.sh" not in (out / ".pdctl-files").read_text()


def test_a_symlinked_output_folder_is_refused(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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
    where: str,
    spec: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
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
        ".": "the working folder",
        "cwd": "the working folder",
        "parent": "a parent of",
        "home": "your home folder",
        "/": "the root folder",
    }
    refused(spec, out[where], capsys, phrase[where])
    assert sorted(os.listdir(work)) == [".pdctl-bundle"] and os.listdir(home) == []


def test_a_symlinked_marker_is_not_followed(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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
    files = out / ".pdctl-files"
    listed = files.read_text()
    # A list naming a path outside the folder is refused before anything changes.
    files.write_text("# list\n../victim/precious\n")
    refused(spec, out, capsys, "the list of pdctl's files is damaged")
    # A list that is a link is not read.
    files.unlink()
    (victim / "list").write_text("# list\nprecious\n")
    files.symlink_to(victim / "list")
    refused(spec, out, capsys, ".pdctl-files is a symbolic link")
    # A listed file behind a symlinked folder inside the bundle is not removed through it.
    files.unlink()
    files.write_text(listed + "sub/precious\n")
    (out / "sub").symlink_to(victim)
    assert render(spec, out, capsys)[0] == 0
    assert (victim / "precious").read_text() == "precious\n"
    assert (out / "sub").is_symlink()


def test_a_symlinked_folder_where_pdctl_writes_is_refused(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "hosts").symlink_to(victim)
    (out / ".pdctl-bundle").write_text("qwen-docker\n")
    refused(spec, out, capsys, "is a symbolic link or a file where pdctl writes a folder")
    assert os.listdir(victim) == []


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def stage(out: Path, name: str, pid: int, age: float = 0.0, host: str = "") -> Path:
    folder = out / f".pdctl-render-{name}"
    (folder / "hosts").mkdir(parents=True)
    (folder / "hosts" / "start.sh").write_text("half written")
    marker = folder / ".pdctl-render"
    marker.write_text(f"pdctl-render {pid} {host or socket.gethostname()}\n")
    if age:
        then = time.time() - age
        os.utime(marker, (then, then))
    return folder


def test_staging_folders_of_killed_runs_are_removed(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert render(spec, out, capsys)[0] == 0
    dead = stage(out, "dead0000", dead_pid())
    old = stage(out, "old00000", os.getpid(), age=2 * 3600)
    other_host = stage(out, "away0000", 1, age=2 * 3600, host="another-machine")
    code, err = render(spec, out, capsys)
    assert code == 0, err
    assert not dead.exists() and not old.exists() and not other_host.exists()
    assert f"removed {dead}" in err
    assert not [e for e in os.listdir(out) if e.startswith(".pdctl-render")]


def test_a_killed_run_in_a_new_folder_does_not_block_the_next(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    stage(out, "dead0000", dead_pid())
    assert render(spec, out, capsys)[0] == 0
    assert sorted(os.listdir(out)) == [".pdctl-bundle", ".pdctl-files", "hosts"]


def test_a_fresh_staging_folder_of_a_running_render_is_kept(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert render(spec, out, capsys)[0] == 0
    with subprocess.Popen(["sleep", "60"]) as running:
        try:
            live = stage(out, "live0000", running.pid)
            other_host = stage(out, "away0000", 1, host="another-machine")
            unmarked = out / ".pdctl-render-mine0000"
            unmarked.mkdir()
            (unmarked / "data").write_text("not pdctl's\n")
            assert render(spec, out, capsys)[0] == 0
        finally:
            running.kill()
    assert (live / "hosts" / "start.sh").read_text() == "half written"
    assert (other_host / ".pdctl-render").is_file()
    assert (unmarked / "data").read_text() == "not pdctl's\n"


def test_a_render_already_writing_the_folder_stops_the_second(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert render(spec, out, capsys)[0] == 0
    before = tree(out)
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        code, err = render(spec, out, capsys)
    finally:
        os.close(fd)
    assert code == 1 and "another pdctl render is writing this folder" in err
    assert len(err.splitlines()) == 1
    assert tree(out) == before


def test_a_new_folder_gets_exactly_the_bundle(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "deep" / "out"
    assert render(spec, out, capsys)[0] == 0
    scripts = [SERVE.format(i).replace("start", name) for i in (0, 1) for name in ("start", "stop")]
    assert sorted(tree(out)) == [".pdctl-bundle", ".pdctl-files", *scripts]
    assert os.access(out / SERVE.format(0), os.X_OK)
    assert out.stat().st_mode & 0o777 == 0o755
