"""Rendered host scripts run for real under bash: stop.sh ends only what start.sh started, and
the conda setup finds conda where a non-interactive SSH shell would not."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.render.template import render_template
from pdctl.spec import load_text
from tests.helpers import wait_until, written

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("bash", "setsid", "ps", "readlink")),
    reason="needs bash, setsid, ps and readlink",
)

SPEC = """\
name: demo
model: {{name: m/x}}
engine: {{device: cpu}}
hosts:
  - name: lo
    address: 127.0.0.1
    runtime: venv
    venv: {venv}
    dataDir: {data}
    hfCache: {data}/hf
serve: {{replicas: 1}}
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by us) counts as gone.
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pid: int) -> bool:
    return wait_until(lambda: not alive(pid), f"pid {pid} gone", timeout=10)


@pytest.fixture
def unit(tmp_path: Path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    stub = venv / "bin" / "vllm"
    stub.write_text("#!/bin/sh\nexec sleep 300\n")
    stub.chmod(0o755)
    spec, _ = load_text(SPEC.format(venv=venv, data=tmp_path / "data"), "spec.yaml")
    bundle = render(make_plan(spec))
    scripts = {}
    for name in ("start.sh", "stop.sh"):
        path = written(tmp_path / name, bundle[f"hosts/lo/demo-serve-0/{name}"])
        scripts[name] = path
    unit_dir = tmp_path / "data" / "demo" / "demo-serve-0"
    started: list[subprocess.Popen] = []
    yield scripts, unit_dir, started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    pid_file = unit_dir / "pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def bash(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(path)], capture_output=True, text=True, timeout=60)


def test_stop_ends_the_process_group_start_made(unit) -> None:
    scripts, unit_dir, _ = unit
    res = bash(scripts["start.sh"])
    assert res.returncode == 0, res.stderr
    pid = int((unit_dir / "pid").read_text())
    assert alive(pid)
    again = bash(scripts["start.sh"])
    assert "already running" in again.stdout
    assert int((unit_dir / "pid").read_text()) == pid
    res = bash(scripts["stop.sh"])
    assert res.returncode == 0, res.stderr
    assert wait_gone(pid)
    assert not (unit_dir / "pid").exists()


def test_a_stale_pid_of_another_process_group_is_left_alone(unit, tmp_path: Path) -> None:
    scripts, unit_dir, started = unit
    # Someone else's session leader, as after a crash or reboot reused the recorded pid.
    other = subprocess.Popen(["sleep", "300"], start_new_session=True, cwd=tmp_path)
    started.append(other)
    unit_dir.mkdir(parents=True)
    (unit_dir / "pid").write_text(f"{other.pid}\n")
    res = bash(scripts["stop.sh"])
    assert res.returncode == 0, res.stderr
    assert "was not running" in res.stdout
    assert other.poll() is None, "stop.sh killed a process group it did not start"
    assert not (unit_dir / "pid").exists()
    # start.sh is not fooled either: it starts the unit instead of reporting it running.
    (unit_dir / "pid").write_text(f"{other.pid}\n")
    res = bash(scripts["start.sh"])
    assert res.returncode == 0 and "started" in res.stdout, res.stdout + res.stderr
    assert int((unit_dir / "pid").read_text()) != other.pid
    assert other.poll() is None


# A stand-in conda: `shell.bash hook` defines the `conda` shell function, as the real one does.
FAKE_CONDA = (Path(__file__).parent / "data" / "fake-conda.sh").read_text()


def test_conda_setup_finds_conda_off_path(tmp_path: Path) -> None:
    """A non-interactive SSH shell has neither conda on PATH nor `conda init`'s function."""
    home = tmp_path / "home"
    conda = home / "miniforge3" / "bin" / "conda"
    conda.parent.mkdir(parents=True)
    conda.write_text(FAKE_CONDA)
    conda.chmod(0o755)
    setup = render_template(
        "setup-conda.sh.j2", conda_env="pdctl-vllm-0.33.0", package="vllm", version="0.33.0",
        pip="vllm==0.33.0",
    )
    script = tmp_path / "setup.sh"
    script.write_text("set -euo pipefail\n" + setup + 'echo "env=$CONDA_DEFAULT_ENV"\n')
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    res = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("env=pdctl-vllm-0.33.0")
    assert (home / "miniforge3" / "envs" / "pdctl-vllm-0.33.0").is_dir()
    # No conda anywhere: one clear line, exit 1.
    nowhere = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    res = subprocess.run(["bash", str(script)], env=nowhere, capture_output=True, text=True)
    assert res.returncode == 1 and "pdctl: conda not found" in res.stderr


# ---- docker: start.sh / stop.sh against the real test dockerd ------------------------------

DOCKER_SPEC = """\
name: scrt
model: {{name: stand-in}}
engine: {{device: cpu, image: "{image}"}}
hosts:
  - {{name: lo, address: 127.0.0.1, runtime: docker, dataDir: {data}, hfCache: {data}/hf}}
serve: {{port: {port}}}
"""
SLEEPER = "pdctl-test/sleeper:3"
# Sleeps (ignoring the serve arguments) and ends at once on SIGTERM.
ENTRYPOINT = """ENTRYPOINT ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 300 & wait", "engine"]"""


@pytest.fixture(scope="module")
def dockerd(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    import io
    import tarfile

    url = os.environ.get("PDCTL_TEST_DOCKER_HOST")
    if not url:
        pytest.skip("no test dockerd: run `RUN=... tests/services.sh start` and source $RUN/env")
    busybox = shutil.which("busybox")
    if busybox is None or shutil.which("docker") is None:
        pytest.skip("needs the docker CLI and busybox-static")
    env = {**os.environ, "DOCKER_HOST": url}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("bin/busybox")
        data = Path(busybox).read_bytes()
        info.mode, info.size = 0o755, len(data)
        tar.addfile(info, io.BytesIO(data))
        for tool in ("sh", "sleep"):
            link = tarfile.TarInfo(f"bin/{tool}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
    imported = ["docker", "import", "--change", ENTRYPOINT, "-", SLEEPER]
    subprocess.run(imported, input=buf.getvalue(), env=env, check=True, capture_output=True)
    return env


def test_docker_scripts_touch_only_their_own_container(dockerd, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    text = DOCKER_SPEC.format(image=SLEEPER, data=tmp_path / "data", port=port)
    spec, _ = load_text(text, "spec.yaml")
    bundle = render(make_plan(spec))
    start, stop = tmp_path / "start.sh", tmp_path / "stop.sh"
    start.write_text(bundle["hosts/lo/scrt-serve-0/start.sh"])
    stop.write_text(bundle["hosts/lo/scrt-serve-0/stop.sh"])

    def sh(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(path)], env=dockerd, capture_output=True, text=True)

    def docker(*args: str, check: bool = True) -> str:
        done = subprocess.run(["docker", *args], env=dockerd, capture_output=True, text=True,
                              check=check)
        return done.stdout

    def names() -> list[str]:
        return docker("ps", "-a", "--format", "{{.Names}}").split()

    docker("rm", "-f", "scrt-serve-0", check=False)
    try:
        # Someone else's container under the unit's name: neither script removes it.
        docker("create", "--name", "scrt-serve-0", SLEEPER)
        res = sh(start)
        assert res.returncode == 1 and "pdctl did not create" in res.stderr
        res = sh(stop)
        assert res.returncode == 1 and "not created by this deployment" in res.stderr
        assert "scrt-serve-0" in names()
        docker("rm", "-f", "scrt-serve-0")
        # Its own: started once, found running the second time, removed by stop.sh.
        assert sh(start).returncode == 0
        assert "already running" in sh(start).stdout
        label = '{{index .Config.Labels "pdctl.io/deployment"}}'
        assert docker("inspect", "-f", label, "scrt-serve-0").strip() == "scrt"
        res = sh(stop)
        assert res.returncode == 0 and "stopped scrt-serve-0" in res.stdout
        assert "scrt-serve-0" not in names()
        res = sh(stop)
        assert res.returncode == 0 and "is not running" in res.stdout
    finally:
        docker("rm", "-f", "scrt-serve-0", check=False)


def shell_check(function: str, pid: int) -> bool:
    """Run one of process-owned.sh.j2's functions (runs, group_runs) on `pid` under bash."""
    script = render_template("process-owned.sh.j2") + f'\n{function} "$1"\n'
    done = subprocess.run(["bash", "-c", script, "check", str(pid)], capture_output=True)
    return done.returncode == 0


def test_a_zombie_server_and_a_group_of_zombies_do_not_run():
    """An exited process nobody reaped yet answers `kill -0`, so status would call a dead
    server running and stop.sh would wait out its grace on a group of zombies (a host whose
    PID 1 does not reap keeps them for good): runs/group_runs read the process state."""
    server = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        assert shell_check("runs", server.pid) and shell_check("group_runs", server.pid)
        os.kill(server.pid, signal.SIGKILL)
        wait_until(lambda: not alive(server.pid), "the server is a zombie", timeout=10)
        os.kill(server.pid, 0)  # still there for kill -0: a zombie until we reap it
        os.killpg(server.pid, 0)
        assert not shell_check("runs", server.pid)
        assert not shell_check("group_runs", server.pid)
    finally:
        server.kill()
        server.wait()
    assert not shell_check("runs", server.pid)
