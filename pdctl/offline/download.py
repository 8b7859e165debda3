"""`pdctl bundle`: pip downloads what the spec's hosts install, then the manifest is written.

pip does the resolution (`pip download --only-binary=:all: --python-version --platform
--implementation cp`): https://pip.pypa.io/en/stable/cli/pip_download/ ."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from pdctl import __version__
from pdctl.errors import PdctlError
from pdctl.offline import manifest as mf
from pdctl.offline.need import Need
from pdctl.plan.model import Plan


def spec_hash(plan: Plan) -> str:
    return hashlib.sha256(plan.spec.model_dump_json().encode()).hexdigest()


def pip_command(need: Need, python: str, platform: str, dest: Path) -> list[str]:
    """The `pip download` of one environment's requirements (wheels only, for the hosts)."""
    return [
        sys.executable, "-m", "pip", "download",
        "--only-binary=:all:",
        "--python-version", python,
        "--platform", platform,
        "--implementation", "cp",
        "--dest", str(dest),
        *need.pips,
    ]


def keep_good(folder: Path) -> int:
    """Before downloading again: drop the old manifest (a run that stops half-way leaves none)
    and every file in wheels/ it does not vouch for, so pip never reuses a damaged file.
    Returns how many files were kept."""
    try:
        old = mf.read(folder)
    except mf.BundleError:
        old = None
    (folder / mf.MANIFEST).unlink(missing_ok=True)
    good = {} if old is None else {e.path: e for e in old.files}
    kept = 0
    wheels = folder / mf.WHEELS
    for path in sorted(wheels.iterdir()) if wheels.is_dir() else []:
        entry = good.get(f"{mf.WHEELS}/{path.name}")
        if path.is_file() and entry is not None and mf.check_file(folder, entry) is None:
            kept += 1
        elif path.is_file():
            path.unlink()
    return kept


def bundle(
    plan: Plan,
    found: tuple[Need, ...],
    python: str,
    platform: str,
    folder: Path,
    say: Callable[[str], None],
) -> mf.Manifest:
    """Download every environment's wheels into folder/wheels and write the manifest last."""
    if folder.exists() and not folder.is_dir():
        raise PdctlError(f"{folder}: not a folder")
    (folder / mf.WHEELS).mkdir(parents=True, exist_ok=True)
    kept = keep_good(folder)
    if kept:
        say(f"{kept} files already present with the right sha256: kept")
    for need in found:
        say(f"resolving {' '.join(need.pips)} for {need.what} (Python {python}, {platform})")
        cmd = pip_command(need, python, platform, folder / mf.WHEELS)
        done = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            last = [ln for ln in done.stderr.splitlines() if ln.strip()][-1:] or ["(no output)"]
            raise PdctlError(
                f"pip download of {' '.join(need.pips)} for Python {python} on {platform} "
                f"failed: {last[0].strip()}"
            )
    manifest = mf.Manifest(
        pdctl=__version__,
        spec=spec_hash(plan),
        python=python,
        platform=platform,
        needs=tuple((n.what, n.pips) for n in found),
        files=mf.entries(folder),
    )
    mf.write(folder, manifest)
    return manifest
