"""Environment setup is serialised per login on a host (~/.pdctl/setup.lock): two instances, or
two deployments, started together on their first deploy must not both `conda create` / `pip
install` into one environment.

The host is a real sshd (counting_host.py) whose ~/.bashrc puts a fake `conda` on PATH, as
`conda init` would: `conda create` and the environment's `pip install` take a while and write
begin/end markers, so the markers show whether two setups overlapped. The environment's
`vllm` is the stand-in engine."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import checked
from tests.targets.counting_host import CountingHost, start_counting_host
from tests.targets.testbed import (
    HERE,
    SshEnv,
    free_port,
    host_entry,
    pdctl,
    stand_in_spec,
    write_spec,
)

# A conda whose `create` and the environment's `pip install` (python) take a while and write
# begin/end markers into @ROOT@/markers (@ROOT@: the fake conda's folder).
CONDA = (HERE / "data" / "setup-lock-conda.sh").read_text()

PYTHON = (HERE / "data" / "setup-lock-python.sh").read_text()


def _exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture(scope="module")
def conda_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fakeconda")
    (root / "bin").mkdir()
    _exe(root / "bin" / "conda", CONDA.replace("@ROOT@", str(root)))
    _exe(root / "python", PYTHON.replace("@ROOT@", str(root)))
    shutil.copy(HERE / "fake_vllm.py", root / "vllm")
    (root / "vllm").chmod(0o755)
    return root


@pytest.fixture(scope="module")
def conda_host(
    ssh_env: SshEnv, conda_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CountingHost]:
    host = start_counting_host(
        ssh_env, tmp_path_factory.mktemp("condahost"), name="condahost",
        rc_lines=f'export PATH="{conda_root}/bin:$PATH"\n',
    )
    yield host
    host.stop()


def spec_for(env: SshEnv, host: CountingHost, data: Path) -> Path:
    # conda pip-installs the CUDA build: GPUs are named (the stand-in engine ignores them)
    entry = host_entry(env, host.host, data, runtime="conda", condaEnv="pdctl-lock", gpus=[0, 1])
    spec = stand_in_spec("locked", [entry], {"replicas": 2, "port": free_port()}, engine={})
    return write_spec(data / "spec.yaml", spec)


def markers(root: Path) -> list[str]:
    path = root / "markers"
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def test_two_instances_on_one_host_set_up_the_environment_one_at_a_time(
    ssh_env, conda_host, conda_root, tmp_path
):
    spec = spec_for(ssh_env, conda_host, tmp_path)
    known = ["--known-hosts", conda_host.known_hosts]
    try:
        up = checked(pdctl("up", str(spec), "--yes", *known, "--timeout", "60"))
        assert "starting locked-serve-0" in up.stdout and "starting locked-serve-1" in up.stdout
        # one setup created and installed; the other waited, then found the environment ready
        assert markers(conda_root) == ["create-begin", "create-end", "pip-begin", "pip-end"]
        # released: it names no unit of this deployment (the tests beside it share the lock)
        lock = Path.home() / ".pdctl" / "setup.lock"
        assert "locked-serve" not in lock.read_text()
    finally:
        pdctl("down", str(spec), *known)


def _run_start(unit: Path, path: str, home: Path | None = None) -> subprocess.CompletedProcess:
    """start.sh as `up` runs it; HOME: the unit's deployment folder (its lock is then
    ~/.pdctl/setup.lock there) unless `home` is given."""
    home = home or unit.parent
    env = {"PATH": path, "HOME": str(home), "PDCTL_SETUP_WAIT": "1"}
    return subprocess.run(
        ["bash", str(unit / "start.sh")], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.fixture
def rendered(tmp_path: Path, ssh_env: SshEnv, conda_host: CountingHost) -> Path:
    """The deployment folder of the spec, rendered (not started): its first unit's folder."""
    spec = spec_for(ssh_env, conda_host, tmp_path)
    out = tmp_path / "bundle"
    proc = pdctl("render", str(spec), "--output-dir", str(out))
    if proc.returncode != 0:  # before --output-dir existed
        proc = pdctl("render", str(spec), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    (start,) = out.rglob("locked-serve-0/start.sh")
    deploy = tmp_path / conda_host.host.name / "locked"
    shutil.copytree(start.parent.parent, deploy)
    return deploy / "locked-serve-0"


def test_a_held_lock_times_out_naming_the_lock_file_and_its_holder(rendered: Path):
    (rendered.parent / ".pdctl").mkdir()
    lock = rendered.parent / ".pdctl" / "setup.lock"
    lock.write_text("locked-serve-1 (pid 4242, since 2026-12-01T10:00:00Z)\n")
    # The holder says when it holds the lock (a fixed number of polls could end before a slow
    # machine ran flock, and start.sh would then take the lock itself).
    holder = subprocess.Popen(
        ["flock", str(lock), "sh", "-c", "echo held; exec sleep 300"], stdout=subprocess.PIPE,
        text=True, start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        proc = _run_start(rendered, os.environ["PATH"])
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # flock and its sleep, which holds the lock too
        holder.wait()
        holder.stdout.close()
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"pdctl: locked-serve-0: the environment setup lock {lock} is still held after 1 s by "
        "locked-serve-1 (pid 4242, since 2026-12-01T10:00:00Z); wait for that setup to finish "
        f"(if none runs, remove {lock}) and run pdctl up again"
    )


def _path_without_flock(tmp: Path) -> str:
    """A PATH with every command of /usr/bin and /bin but flock (the mkdir fallback)."""
    bin_dir = tmp / "noflock"
    bin_dir.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        for name in os.listdir(folder):
            if name != "flock" and not (bin_dir / name).exists():
                (bin_dir / name).symlink_to(os.path.join(folder, name))
    return str(bin_dir)


def test_without_flock_a_lock_folder_serialises_and_a_dead_holders_is_taken_over(
    rendered: Path, tmp_path: Path
):
    path = _path_without_flock(tmp_path)
    (rendered.parent / ".pdctl").mkdir()
    folder = rendered.parent / ".pdctl" / "setup.lock.d"
    folder.mkdir()
    sleeper = subprocess.Popen(["sleep", "30"])
    (folder / "pid").write_text(f"{sleeper.pid}\n")
    (folder / "holder").write_text("locked-serve-1 (pid 4242)\n")
    try:
        proc = _run_start(rendered, path)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert proc.returncode == 1
    assert f"the environment setup lock {folder} is still held after 1 s by locked-serve-1 " in (
        proc.stderr
    )
    assert folder.exists()  # a live holder's lock stays
    # the holder died: the lock is taken over; setup runs (and fails: no conda on this PATH)
    proc = _run_start(rendered, path)
    assert proc.returncode == 1
    assert "conda not found" in proc.stderr, proc.stderr
    assert not folder.exists()  # released on exit


def test_two_deployments_sharing_one_environment_take_one_lock(rendered: Path, tmp_path: Path):
    """Another deployment of the same login (another deploy folder) waits for the lock a unit
    of this one holds: both would install into one environment. Without a HOME the lock is
    the deployment's own."""
    home = tmp_path / "home"
    (home / ".pdctl").mkdir(parents=True)
    lock = home / ".pdctl" / "setup.lock"
    other = tmp_path / "other-deployment" / "locked-serve-0"
    shutil.copytree(rendered, other)
    holder = subprocess.Popen(
        ["flock", str(lock), "sh", "-c", "echo held; exec sleep 300"], stdout=subprocess.PIPE,
        text=True, start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        procs = [_run_start(unit, os.environ["PATH"], home) for unit in (rendered, other)]
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    for proc in procs:
        assert proc.returncode == 1 and f"setup lock {lock} is still held" in proc.stderr, (
            proc.stderr)
    # no HOME: the deployment's own lock
    assert not (rendered.parent / "setup.lock").exists()
    proc = subprocess.run(["bash", str(rendered / "start.sh")], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "PDCTL_SETUP_WAIT": "1"}, timeout=60)
    assert (rendered.parent / "setup.lock").exists(), proc.stderr
