"""Mooncake hosts without rdma-core (pdctl issue 10, item 4): the rendered start.sh looks for
the system libraries the mooncake-transfer-engine wheels load (even for protocol tcp) and stops
with one line naming them and the apt/dnf command, before anything is installed or started.
The scripts run for real under bash, against a stand-in `ldconfig` and the machine's own."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from pdctl.plan import make_plan
from pdctl.plan.router import ENGINE_LIBRARIES, MASTER_LIBRARIES
from pdctl.render import render
from pdctl.render.pd_host import library_check
from pdctl.spec import load_text
from tests.conftest import check_scripts
from tests.helpers import checked, written

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("bash", "awk", "grep")), reason="needs bash, awk, grep"
)


def spec_doc(tmp: Path, connector: str = "mooncake") -> dict:
    venv = tmp / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    for exe in ("vllm", "mooncake_master"):  # present: the setup installs nothing
        (venv / "bin" / exe).write_text("#!/bin/sh\nexit 0\n")
        (venv / "bin" / exe).chmod(0o755)
    host = {"runtime": "venv", "venv": str(venv), "dataDir": str(tmp / "data"), "gpus": [0]}
    return {
        "name": "mc",
        "phase": 2,
        "model": {"name": "org/m"},
        "engine": {"version": "0.33.0"},
        "hosts": [
            {"name": "a", "address": "10.0.0.1", **host},
            {"name": "b", "address": "10.0.0.2", **host},
        ],
        "prefill": {"replicas": 1},
        "decode": {"replicas": 1},
        "disaggregation": {"connector": connector, "store": {"enabled": connector == "mooncake"}},
        "router": {"venv": str(venv)},
    }


def scripts(doc: dict) -> dict[str, str]:
    spec, _ = load_text(yaml.safe_dump(doc), "spec.yaml")
    return {a.path: a.text for a in render(make_plan(spec))}


def fake_ldconfig(folder: Path, libs: tuple[str, ...]) -> Path:
    """An `ldconfig` that prints a linker cache (`ldconfig -p` format) holding `libs`."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"{len(libs) + 1} libs found in cache `/etc/ld.so.cache'"]
    lines += [f"\t{lib} (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/{lib}" for lib in libs]
    lines.append("\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6")
    script = written(folder / "ldconfig", "#!/bin/sh\ncat <<'EOF'\n" + "\n".join(lines) + "\nEOF\n")
    script.chmod(0o755)
    return folder


def run(script: str, tmp: Path, path: str, **env: str) -> subprocess.CompletedProcess[str]:
    file = written(tmp / "script.sh", script)
    full = {"HOME": str(tmp / "home"), "PATH": path, "LANG": "C", **env}
    return subprocess.run(["bash", str(file)], capture_output=True, text=True, env=full, timeout=60)


def test_engine_start_sh_stops_naming_the_missing_libraries(tmp_path: Path) -> None:
    files = scripts(spec_doc(tmp_path))
    start = files["hosts/b/mc-decode-0/start.sh"]
    fake = fake_ldconfig(tmp_path / "fake", ("libnuma.so.1", "libcurl.so.4"))
    res = checked(run(start, tmp_path, f"{fake}:/usr/bin:/bin"), 1)
    assert res.stderr.count("\n") == 1, res.stderr
    assert res.stderr == (
        "pdctl: mooncake-transfer-engine-cuda13 needs libibverbs.so.1 libmlx5.so.1 (not found "
        "by ldconfig -p); install: sudo apt-get install -y libibverbs1 ibverbs-providers "
        "(Debian/Ubuntu) or sudo dnf install -y libibverbs (RHEL/Fedora)\n"
    )
    assert not (tmp_path / "data" / "mc" / "mc-decode-0" / "pid").exists()


def test_master_start_sh_stops_before_installing(tmp_path: Path) -> None:
    files = scripts(spec_doc(tmp_path))
    start = files["hosts/a/mc-mooncake-master/start.sh"]
    fake = fake_ldconfig(tmp_path / "fake", ())
    res = run(start, tmp_path, f"{fake}:/usr/bin:/bin")
    assert res.returncode == 1
    assert res.stderr == (
        "pdctl: mooncake_master needs libibverbs.so.1 libnuma.so.1 libcurl.so.4 (not found by "
        "ldconfig -p); install: sudo apt-get install -y libibverbs1 libnuma1 curl "
        "(Debian/Ubuntu) or sudo dnf install -y libibverbs numactl-libs libcurl (RHEL/Fedora)\n"
    )


@pytest.mark.parametrize("libs", [MASTER_LIBRARIES, ENGINE_LIBRARIES])
def test_check_passes_with_the_libraries_in_the_cache_or_ld_library_path(
    libs: tuple[str, ...], tmp_path: Path
) -> None:
    check = "set -euo pipefail\n" + library_check("mooncake", libs) + "echo checked\n"
    res = run(check, tmp_path, f"{fake_ldconfig(tmp_path / 'all', libs)}:/usr/bin:/bin")
    assert (res.returncode, res.stdout, res.stderr) == (0, "checked\n", "")
    # Missing from the cache, found in a folder of LD_LIBRARY_PATH (e.g. MLNX OFED, conda).
    extra = tmp_path / "ofed lib"
    extra.mkdir()
    for lib in libs:
        (extra / lib).write_text("")
    res = run(
        check, tmp_path, f"{fake_ldconfig(tmp_path / 'none', ())}:/usr/bin:/bin",
        LD_LIBRARY_PATH=f"/nowhere::{extra}",
    )
    assert (res.returncode, res.stdout, res.stderr) == (0, "checked\n", "")


def real_ldconfig() -> str | None:
    for folder in ("/sbin", "/usr/sbin", *os.environ.get("PATH", "").split(":")):
        if folder and os.access(Path(folder) / "ldconfig", os.X_OK):
            return str(Path(folder) / "ldconfig")
    return None


def test_check_agrees_with_this_machines_linker_cache(tmp_path: Path) -> None:
    ldconfig = real_ldconfig()
    if ldconfig is None:
        pytest.skip("no ldconfig on this machine")
    cache = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout
    names = {line.split()[0] for line in cache.splitlines()[1:] if line.strip()}
    missing = [lib for lib in ENGINE_LIBRARIES if lib not in names]
    check = "set -euo pipefail\n" + library_check("mooncake", ENGINE_LIBRARIES) + "echo ok\n"
    # A non-root PATH without /sbin: the check still finds ldconfig there.
    res = run(check, tmp_path, "/usr/bin:/bin")
    if missing:
        assert res.returncode == 1 and " ".join(missing) + " (not found" in res.stderr
    else:
        assert (res.returncode, res.stdout) == (0, "ok\n"), res.stderr


def test_import_check_loads_the_engine_after_torch(tmp_path: Path) -> None:
    files = scripts(spec_doc(tmp_path))
    for path in ("hosts/a/mc-prefill-0/start.sh", "hosts/b/mc-decode-0/start.sh"):
        text = files[path]
        assert "python -c 'import torch; from mooncake.engine import TransferEngine'" in text
        assert text.index("ldconfig -p") < text.index("import torch")
    assert "ldconfig" not in files["hosts/a/mc-router/start.sh"]
    nixl = scripts(spec_doc(tmp_path, "nixl"))
    assert not any("ldconfig" in text for text in nixl.values())
    assert "python -c 'import nixl'" in nixl["hosts/a/mc-prefill-0/start.sh"]


def test_scripts_pass_shellcheck(tmp_path: Path) -> None:
    files = scripts(spec_doc(tmp_path))
    check_scripts({p: t for p, t in files.items() if p.endswith(".sh")}, tmp_path / "sc")
