"""`--docker-url HOST=ssh://...`: the docker SDK's SSH transport runs on pdctl's own SSH
connection, so --known-hosts, --accept-new-host-keys and --identity apply as for any host.

Refusals are checked against the real sshd test host lo1 (tests/services.sh). The full path
(host key accepted, `docker system dial-stdio` reaching the real test dockerd) needs an sshd
whose sessions see DOCKER_HOST: this module starts its own on a free loopback port (SetEnv)
and stops it afterwards."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from pdctl.errors import PdctlError
from pdctl.targets.docker.engine import docker_home
from pdctl.targets.docker.transport import DockerAccess, connect
from pdctl.targets.ssh import SshOptions
from tests.conftest import run_cli
from tests.targets.docker.bed import DockerSshd, docker_spec


@pytest.fixture(scope="module")
def lo1() -> tuple[str, int, str, str]:
    """(address, port, client key, the test known_hosts) of the sshd test host lo1."""
    hosts = os.environ.get("PDCTL_TEST_SSH_HOSTS")
    if not hosts or not os.path.exists(hosts):
        pytest.skip("no SSH test hosts: run `RUN=... tests/services.sh start` and source $RUN/env")
    for line in Path(hosts).read_text().splitlines():
        name, address, port = line.split()
        if name == "lo1":
            return (
                address, int(port), os.environ["PDCTL_TEST_SSH_KEY"],
                os.environ["PDCTL_TEST_KNOWN_HOSTS"],
            )
    pytest.skip("no lo1 test host")


def spec_for(tmp_path: Path) -> Path:
    return docker_spec(tmp_path, "viassh", port=18000)


def test_an_unknown_host_key_is_refused(lo1, tmp_path: Path) -> None:
    address, port, key, _ = lo1
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    access = DockerAccess(ssh=SshOptions(known_hosts=str(empty), identity_file=key))
    with pytest.raises(PdctlError, match="unknown host key"):
        connect("lo1", f"ssh://root@{address}:{port}", access)
    assert empty.read_text() == ""


def test_a_changed_host_key_is_refused_even_with_accept_new(lo1, tmp_path: Path) -> None:
    address, port, key, known = lo1
    lines = Path(known).read_text().splitlines()
    lo2_key = next(line.split(maxsplit=1)[1] for line in lines if line.startswith("[127.0.0.2]"))
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[{address}]:{port} {lo2_key}\n")
    access = DockerAccess(
        ssh=SshOptions(known_hosts=str(wrong), accept_new_host_keys=True, identity_file=key)
    )
    with pytest.raises(PdctlError, match="does not match"):
        connect("lo1", f"ssh://root@{address}:{port}", access)


def test_cli_refuses_an_unknown_host_key_in_one_line(lo1, tmp_path, capsys) -> None:
    address, port, key, _ = lo1
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    url = ["--docker-url", f"local=ssh://root@{address}:{port}"]
    argv = ["status", str(spec_for(tmp_path)), *url, "--known-hosts", str(empty), "-i", key]
    code, out, err = run_cli(argv, capsys)
    assert code == 1 and len(err.splitlines()) == 1, err
    assert "unknown host key" in err and "--accept-new-host-keys" in err
    assert empty.read_text() == ""


def test_a_host_key_in_known_hosts_reaches_the_engine_over_ssh(
    docker_sshd: DockerSshd, tmp_path: Path
) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(docker_sshd.known_line)
    access = DockerAccess(ssh=SshOptions(known_hosts=str(known), identity_file=docker_sshd.key))
    client = connect("local", f"ssh://root@127.0.0.1:{docker_sshd.port}", access)
    try:
        assert client.ping() is True
        paramiko_client = client.api._custom_adapter.ssh_client
        assert paramiko_client is not None  # the SDK's channels run on pdctl's connection
        assert paramiko_client.get_host_keys().lookup(f"[127.0.0.1]:{docker_sshd.port}")
        # `~/` on this Docker host is the SSH user's home, asked over the same connection.
        assert docker_home(client, f"ssh://root@127.0.0.1:{docker_sshd.port}") == "/root"
    finally:
        client.close()


def test_cli_accept_new_host_keys_records_the_key_and_status_works(
    docker_sshd: DockerSshd, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    argv = [
        "status", str(spec_for(tmp_path)), "-o", "json", "--docker-url",
        f"local=ssh://root@127.0.0.1:{docker_sshd.port}", "--known-hosts", str(known), "-i",
        docker_sshd.key,
    ]
    code, _, err = run_cli(argv, capsys)
    assert code == 1 and "unknown host key" in err, err
    code, out, err = run_cli([*argv, "--accept-new-host-keys"], capsys)
    assert code == 0, err
    answer = yaml.safe_load(out)
    # nothing runs yet: the planned instance is listed as not started (as on SSH hosts)
    states = [(i["unit"], i["state"]) for i in answer["instances"]]
    assert (answer["name"], states) == ("viassh", [("viassh-serve-0", "not started")])
    assert known.read_text().split() == docker_sshd.known_line.split()
    code, out, err = run_cli(argv, capsys)  # the recorded key is trusted from now on
    assert code == 0, err
