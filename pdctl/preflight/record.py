"""Recordings: one folder per host holding the raw outputs (and `_kubernetes/` for a cluster).
A folder of real outputs named as in fixtures/gpu/h200x2/ replays as it is."""

from __future__ import annotations

from pathlib import Path

from pdctl.errors import PdctlError, UsageError
from pdctl.preflight import gpu as f
from pdctl.preflight.facts import CLUSTER, SSH

MARKERS = (f.QUERY, f.TOPO, f.NVML, f.SMI, f.PROC, SSH, f.QUERY + ".err")


def write(root: Path, raw: dict[str, dict[str, str]]) -> None:
    for folder, files in sorted(raw.items()):
        d = root / folder
        d.mkdir(parents=True, exist_ok=True)
        for name, text in sorted(files.items()):
            (d / name).write_text(text, encoding="utf-8")


MAX_FILE_BYTES = 16 * 1024 * 1024  # a recorded output; `nvidia-smi -q` of 8 GPUs is ~200 KiB


def _read_folder(d: Path) -> dict[str, str]:
    try:
        return {p.name: _read_file(p)
                for p in sorted(d.iterdir())
                if p.is_file() and not p.name.startswith(".")}
    except OSError as exc:
        raise UsageError(f"cannot read recording folder {d}: {exc.strerror or exc}",
                         fix="give a folder made by `pdctl preflight --record DIR`") from None


def _read_file(p: Path) -> str:
    with p.open("rb") as stream:
        data = stream.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise UsageError(f"recording file {p} is larger than {MAX_FILE_BYTES >> 20} MiB",
                         fix="give a folder made by `pdctl preflight --record DIR`")
    return data.decode("utf-8", errors="replace")


def read(root: Path, hosts: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """Raw outputs per folder. A DIR holding the files itself (no host folders) stands for
    the one host of a one-host plan."""
    # A folder named on the command line: missing or unreadable is a usage error (exit 2).
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "does not exist"
        raise UsageError(f"recording folder {root} {what}",
                         fix=f"make one with `pdctl preflight --record {root}`")
    if any((root / m).is_file() for m in MARKERS) and not any((root / h).is_dir() for h in hosts):
        if not hosts:
            raise PdctlError(
                f"{root} holds the outputs of one host, but the plan runs on Kubernetes; "
                f"a cluster recording is a folder with {CLUSTER}/ in it")
        if len(hosts) != 1:
            raise PdctlError(
                f"{root} holds the outputs of one host, but the plan uses {len(hosts)} hosts; "
                "put each host's files in a folder named after the host")
        return {hosts[0]: _read_folder(root)}
    try:
        folders = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError as exc:
        raise UsageError(f"cannot read recording folder {root}: {exc.strerror or exc}",
                         fix="check its permissions") from None
    return {p.name: _read_folder(p) for p in folders}
