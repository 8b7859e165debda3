"""`pdctl up/status/logs/down` over real SSH (tests/services.sh hosts) with a stand-in engine.

The stand-in (fake_vllm.py) serves /health and /v1/models, so these tests exercise the whole
path fast: host-key checks, SFTP upload, secrets file, start/stop scripts, port-forwarded
health probes, idempotence, restarts after a spec change, failure reports and cleanup.
"""

from __future__ import annotations

import json
import signal
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from pdctl.targets.ssh import makedirs
from pdctl.targets.state import Desired, Observed, diff
from tests.helpers import checked, known
from tests.targets.hosts.test_faults import Up, wait_pid_file
from tests.targets.testbed import (
    SshEnv,
    connect,
    free_port,
    host_entry,
    listening,
    lo1_spec,
    pdctl,
    processes_in,
    processes_with,
    stand_in_spec,
    status_rows,
    write_spec,
)


def two_host_spec(env: SshEnv, venv: Path, data: Path, port: int, **serve: object) -> dict:
    names = [h.name for h in env.hosts]
    if "node1" not in names:
        pytest.skip("needs the network-namespace test host node1 (two hosts, one port)")
    chosen = [env.host("lo1"), env.host("node1")]
    return stand_in_spec(
        "fake", [host_entry(env, h, data, venv=str(venv)) for h in chosen],
        {"replicas": 2, "port": port, **serve}, secrets={"hfToken": {"env": "PDCTL_TEST_HF_TOKEN"}},
    )


def deploy(env: SshEnv, venv: Path, data: Path):
    port = free_port()
    spec = write_spec(data / "spec.yaml", two_host_spec(env, venv, data, port))
    secret = {"PDCTL_TEST_HF_TOKEN": "hf_test_not_a_real_token_1234"}
    up = pdctl("up", str(spec), "--yes", *known(env), "--timeout", "60", env=secret)
    return spec, port, secret, up


@pytest.fixture(scope="module")
def deployed(ssh_env: SshEnv, fake_venv: Path, tmp_path_factory: pytest.TempPathFactory):
    """One deployment shared by the tests that only read it."""
    data = tmp_path_factory.mktemp("deployed")
    spec, port, secret, up = deploy(ssh_env, fake_venv, data)
    yield spec, port, secret, up, data
    pdctl("down", str(spec), *known(ssh_env))


@pytest.fixture
def own_deployment(ssh_env: SshEnv, fake_venv: Path, tmp_path: Path):
    """A deployment for a test that changes it."""
    spec, port, secret, up = deploy(ssh_env, fake_venv, tmp_path)
    yield spec, port, secret, up
    pdctl("down", str(spec), *known(ssh_env))


def pids_of(spec: Path, env: SshEnv) -> dict[str, str]:
    return {unit: r["pid"] for unit, r in status_rows(spec, *known(env)).items()}


def test_up_starts_every_instance_and_reports_where(deployed, ssh_env: SshEnv):
    spec, port, secret, up, _ = deployed
    assert up.returncode == 0, up.stdout + up.stderr
    assert "send requests to" in up.stdout
    assert f":{port}/v1" in up.stdout
    status = checked(pdctl("status", str(spec), "-o", "json", *known(ssh_env)))
    rows = json.loads(status.stdout)["instances"]
    assert len(rows) == 2
    assert {r["health"] for r in rows} == {"healthy"}
    assert {r["model"] for r in rows} == {"stand-in"}
    assert all(r["pid"].isdigit() for r in rows)


def test_secrets_file_is_0600_and_nothing_is_wider(deployed):
    spec, port, secret, up, tmp_path = deployed
    assert up.returncode == 0, up.stdout + up.stderr
    value = secret["PDCTL_TEST_HF_TOKEN"]
    deploy = tmp_path / "lo1" / "fake"
    assert stat.S_IMODE(deploy.stat().st_mode) == 0o700
    env_file = deploy / "secrets.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert value in env_file.read_text()
    for path in deploy.rglob("*"):
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
        if path.is_file() and path != env_file:
            assert value not in path.read_text(errors="replace"), path
    assert processes_with(value) == []
    assert value not in up.stdout + up.stderr


def test_second_up_changes_nothing(deployed, ssh_env: SshEnv):
    spec, port, secret, up, _ = deployed
    assert up.returncode == 0, up.stdout + up.stderr
    pids = pids_of(spec, ssh_env)
    again = checked(pdctl("up", str(spec), "--yes", *known(ssh_env), env=secret))
    assert "nothing to change" in again.stdout
    assert pids_of(spec, ssh_env) == pids


def test_spec_change_restarts_only_the_affected_instance(own_deployment, ssh_env, tmp_path):
    spec, port, secret, up = own_deployment
    assert up.returncode == 0, up.stdout + up.stderr
    before = pids_of(spec, ssh_env)
    data = yaml.safe_load(spec.read_text())
    data["hosts"][1]["hfCache"] = str(tmp_path / "cache2")  # only host 2's unit changes
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    dry = pdctl("up", str(spec), "--dry-run", *known(ssh_env))
    assert "restart" in dry.stdout and "keep" in dry.stdout, dry.stdout
    checked(pdctl("up", str(spec), "--yes", *known(ssh_env), env=secret))
    after = status_rows(spec, *known(ssh_env))
    assert after["fake-serve-0"]["pid"] == before["fake-serve-0"]
    assert after["fake-serve-1"]["pid"] != before["fake-serve-1"]
    assert after["fake-serve-1"]["health"] == "healthy"


def test_logs_show_the_engine_output(deployed, ssh_env: SshEnv):
    spec, port, secret, up, _ = deployed
    assert up.returncode == 0, up.stdout + up.stderr
    out = checked(pdctl("logs", str(spec), "fake-serve-0", *known(ssh_env)))
    assert "fake-vllm serving stand-in" in out.stdout
    missing = pdctl("logs", str(spec), "nope", *known(ssh_env))
    assert missing.returncode == 2 and "fake-serve-0" in missing.stderr


def test_down_removes_everything_and_twice_is_harmless(ssh_env, fake_venv, tmp_path):
    port = free_port()
    spec = write_spec(tmp_path / "spec.yaml", two_host_spec(ssh_env, fake_venv, tmp_path, port))
    secret = {"PDCTL_TEST_HF_TOKEN": "x"}
    checked(pdctl("up", str(spec), "--yes", *known(ssh_env), env=secret))
    assert listening(port)
    down = checked(pdctl("down", str(spec), *known(ssh_env)))
    assert "stopped fake-serve-0" in down.stdout
    assert "removed the deployment folder of 'fake' on every host" in down.stdout, down.stdout
    assert not listening(port) and not listening(port + 1)
    assert not (tmp_path / "lo1").exists()
    assert processes_in(tmp_path) == []
    again = pdctl("down", str(spec), *known(ssh_env))
    assert again.returncode == 0 and "nothing was running" in again.stdout
    # The second down found no folder: it says so, and claims no removal.
    assert "no deployment folder of 'fake' on lo1" in again.stdout, again.stdout
    assert "removed the deployment folder" not in again.stdout, again.stdout


def test_down_waits_for_what_outlives_the_engine_in_its_folder(ssh_env, fake_venv, tmp_path):
    """start.sh's log writer ends only once the engine's last process closed its output: a
    child outside the engine's group that holds it 2 s longer keeps it (and itself) running.
    `down` says stopped once nothing runs in the unit's folder, not while they still do."""
    engine = {"device": "cpu", "env": {"FAKE_VLLM_LINGER": "2"}}
    spec = lo1_spec(ssh_env, tmp_path, "fake", venv=fake_venv, engine=engine)
    checked(pdctl("up", str(spec), "--yes", *known(ssh_env)))
    assert len(processes_in(tmp_path)) >= 3  # the engine, its lingering child, the log writer
    down = checked(pdctl("down", str(spec), *known(ssh_env)))
    assert "stopped fake-serve-0" in down.stdout
    assert processes_in(tmp_path) == []


def test_failure_reports_the_engine_error_and_leaves_nothing(ssh_env, fake_venv, tmp_path):
    port = free_port()
    data = two_host_spec(ssh_env, fake_venv, tmp_path, port)
    data["model"]["name"] = "/nonexistent/model"
    spec = write_spec(tmp_path / "spec.yaml", data)
    up = pdctl(
        "up", str(spec), "--yes", *known(ssh_env), "--timeout", "30",
        env={"PDCTL_TEST_HF_TOKEN": "x"},
    )
    assert up.returncode == 1
    assert "model path /nonexistent/model does not exist" in up.stdout
    assert "its log ends: OSError: fake-vllm: model path" in up.stderr
    assert "FAILED" in up.stdout
    assert processes_in(tmp_path) == []
    assert not listening(port)
    pdctl("down", str(spec), *known(ssh_env))


def test_missing_secret_fails_before_anything_starts(ssh_env, fake_venv, tmp_path):
    spec = write_spec(tmp_path / "spec.yaml", two_host_spec(ssh_env, fake_venv, tmp_path, 18999))
    up = checked(pdctl("up", str(spec), "--yes", *known(ssh_env)), 1)
    assert "PDCTL_TEST_HF_TOKEN is not set" in up.stderr
    assert not (tmp_path / "lo1").exists()


def test_unknown_host_key_is_refused(ssh_env, fake_venv, tmp_path):
    spec = write_spec(tmp_path / "spec.yaml", two_host_spec(ssh_env, fake_venv, tmp_path, 18999))
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    dry = checked(pdctl("up", str(spec), "--dry-run", "--known-hosts", str(empty)), 1)
    assert "unknown host key" in dry.stderr and "--accept-new-host-keys" in dry.stderr
    accepted = pdctl(
        "up", str(spec), "--dry-run", "--known-hosts", str(empty), "--accept-new-host-keys"
    )
    assert accepted.returncode == 0, accepted.stderr
    assert empty.read_text() == ""  # a dry run trusts new keys for that run only
    checked(pdctl("status", str(spec), "--known-hosts", str(empty), "--accept-new-host-keys"))
    assert len(empty.read_text().splitlines()) == 2
    # now known: accepted without the flag
    assert pdctl("up", str(spec), "--dry-run", "--known-hosts", str(empty)).returncode == 0


def test_changed_host_key_is_refused_even_with_accept_new(ssh_env, fake_venv, tmp_path):
    spec = write_spec(tmp_path / "spec.yaml", two_host_spec(ssh_env, fake_venv, tmp_path, 18999))
    lines = Path(ssh_env.known_hosts).read_text().splitlines()
    by_name = {line.split()[0]: line.split() for line in lines}
    lo1 = by_name["[127.0.0.1]:2222"]
    other = next(v for k, v in by_name.items() if k != "[127.0.0.1]:2222")
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"{lo1[0]} {other[1]} {other[2]}\n")  # lo1 with another host's key
    dry = pdctl("up", str(spec), "--dry-run", "--known-hosts", str(wrong), "--accept-new-host-keys")
    assert dry.returncode == 1
    assert "does not match" in dry.stderr


def test_ctrl_c_stops_what_this_run_started(ssh_env, fake_venv, tmp_path):
    data = two_host_spec(ssh_env, fake_venv, tmp_path, free_port())
    data["engine"]["env"] = {"FAKE_VLLM_HANG": "1"}  # started, never healthy
    spec = write_spec(tmp_path / "spec.yaml", data)
    up = Up(spec, ssh_env.known_hosts)
    try:
        for i, host in enumerate(h["name"] for h in data["hosts"]):  # both instances started
            wait_pid_file(tmp_path / host / "fake" / f"fake-serve-{i}" / "pid", up)
        up.proc.send_signal(signal.SIGINT)
        rc, out, err = up.finish()
        assert rc == 1, out + err
        assert "interrupted (Ctrl-C)" in out + err
        assert "stopped what this run started: fake-serve-0, fake-serve-1" in out + err
        assert processes_in(tmp_path) == []
    finally:
        pdctl("down", str(spec), *known(ssh_env))


# A host whose scripts cannot be written starts none of its units: `up` fails naming the
# upload, and no start.sh is run that is not there ('start.sh: No such file or directory').
def test_a_failed_upload_starts_nothing_on_that_host(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
) -> None:
    spec = lo1_spec(ssh_env, tmp_path, "fup", fake_venv)
    deploy = tmp_path / "lo1" / "fup"
    deploy.mkdir(parents=True)
    (deploy / "fup-serve-0").write_text("a file where the unit's folder goes\n")
    up = pdctl("up", str(spec), "--yes", "--timeout", "30", "--known-hosts", ssh_env.known_hosts)
    assert up.returncode == 1, up.stdout + up.stderr
    out = up.stdout + up.stderr
    assert "uploading scripts" in out, out
    assert "No such file or directory" not in out, out
    assert "start script failed" not in out, out


# Two pdctl sessions creating the same folder at once (two hosts whose dataDir lies on one
# shared filesystem, such as an NFS home; or the test hosts, which share this machine's) must
# both succeed: a folder that appears between pdctl's check and its mkdir is not an error.
#
# Over a real SFTP session to a real sshd host. The race is made certain, not timed: between
# pdctl's stat (missing) and its mkdir, a second real SFTP session creates the folder.
class OtherWriterFirst:
    """A real SFTP client; the first time it is asked about `folder` and answers 'missing',
    `other` (another real session) creates that folder right after."""

    def __init__(self, sftp: Any, other: Any, folder: str) -> None:
        self.sftp, self.other, self.folder, self.raced = sftp, other, folder, False

    def stat(self, path: str) -> Any:
        try:
            return self.sftp.stat(path)
        except FileNotFoundError:
            if path == self.folder and not self.raced:
                self.raced = True
                self.other.mkdir(path, mode=0o700)
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sftp, name)


def test_makedirs_accepts_a_folder_made_meanwhile(ssh_env: SshEnv, tmp_path: Path) -> None:
    first, second = connect(ssh_env), connect(ssh_env)
    try:
        shared = str(tmp_path / "shared")
        sftp = OtherWriterFirst(first.client.open_sftp(), second.client.open_sftp(), shared)
        makedirs(sftp, f"{shared}/deploy", 0o700)
        assert sftp.raced
        assert (tmp_path / "shared" / "deploy").is_dir()
    finally:
        first.close()
        second.close()


# A unit found stopped whose scripts changed is a start of the new version, not a restart:
# nothing was running, so nothing is 'kept' or 'stopped'; and undoing it puts the previous
# scripts back WITHOUT starting them (the unit was stopped before `up`: it stays stopped).
NAME = "undost"


def test_diff_of_a_stopped_unit_whose_scripts_changed_is_a_start():
    from pdctl.spec.model import Host

    host = Host(name="h", address="127.0.0.1")
    wanted = [Desired(host, "u", "serve", "new", 8000)]
    change = diff(wanted, [Observed("h", "u", "old", running=False)])[0]
    assert (change.action, change.why) == ("start", "spec changed, not running")
    change = diff(wanted, [Observed("h", "u", "old", running=True)])[0]
    assert (change.action, change.why) == ("restart", "spec changed")


def test_undo_of_a_stopped_unit_keeps_it_stopped_with_its_previous_scripts(
    ssh_env, fake_venv, tmp_path
):
    port = free_port()
    known = ["--known-hosts", ssh_env.known_hosts]
    first = lo1_spec(ssh_env, tmp_path, NAME, fake_venv, port, file="su1.yaml")
    hang_engine = {"device": "cpu", "env": {"FAKE_VLLM_HANG": "1"}}
    hang = lo1_spec(ssh_env, tmp_path, NAME, fake_venv, port, hang_engine, file="su2.yaml")
    up = pdctl("up", str(first), "--yes", *known, "--timeout", "60")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        unit = tmp_path / "lo1" / NAME / f"{NAME}-serve-0"
        before = (unit / "start.sh").read_text()
        stop = subprocess.run(["bash", str(unit / "stop.sh")], capture_output=True, text=True)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        rows = status_rows(first, *known)
        assert [r["state"] for r in rows.values()] == ["stopped"], rows

        up = pdctl("up", str(hang), "--yes", *known, "--timeout", "5")
        out = up.stdout + up.stderr
        assert up.returncode == 1, out
        assert "spec changed, not running" in out
        assert "the running version" not in out  # nothing ran: nothing kept or stopped
        assert "(healthy)" not in out
        assert f"the previous version of {NAME}-serve-0 (not started" in out
        # as before up: stopped, with the scripts of su1.yaml
        assert not listening(port)
        assert (unit / "start.sh").read_text() == before
        rows = status_rows(first, *known)
        assert [r["state"] for r in rows.values()] == ["stopped"], rows
    finally:
        down = pdctl("down", str(first), *known)
    assert down.returncode == 0, down.stdout + down.stderr
