"""How pdctl reaches Docker engines (--docker-url): plain tcp:// refused, TLS built and used
by the real docker SDK against the real test dockerd (behind a TLS front), policy per URL."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import yaml

from pdctl.errors import PdctlError, UsageError
from pdctl.targets.docker.transport import DockerAccess, check, connect
from tests.conftest import run_cli
from tests.targets.docker.bed import docker_spec
from tests.targets.testbed import closed_port
from tests.targets.tls_engine import TlsEngine, make_certs


def write_spec(tmp_path: Path, secrets: bool = False) -> Path:
    token = {"secrets": {"hfToken": {"env": "HF_TOKEN"}}} if secrets else {}
    return docker_spec(tmp_path, "tls", port=18000, **token)


@pytest.fixture
def listener():
    """A TCP port that accepts connections; the test checks that nobody connected."""
    sock = socket.create_server(("127.0.0.1", 0))
    sock.setblocking(False)
    yield sock
    sock.close()


def nobody_connected(sock: socket.socket) -> bool:
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return True
    conn.close()
    return False


@pytest.mark.parametrize("command", ["up", "status", "down"])
def test_plain_tcp_is_refused_before_connecting(
    command: str, tmp_path: Path, listener: socket.socket, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    spec = write_spec(tmp_path, secrets=True)
    port = listener.getsockname()[1]
    argv = [command, str(spec), "--docker-url", f"local=tcp://127.0.0.1:{port}"]
    code, out, err = run_cli([*argv, "--yes"] if command == "up" else argv, capsys)
    assert code == 2, out + err
    assert len(err.splitlines()) == 1, err
    assert f"--docker-url local=tcp://127.0.0.1:{port}" in err
    assert "HF_TOKEN" in err and "in clear" in err
    assert "--docker-tls" in err and "--insecure-docker" in err
    assert "hf_secret_value" not in out + err
    assert nobody_connected(listener)


def test_insecure_docker_allows_plain_tcp_and_tls_with_it_contradicts(tmp_path, capsys) -> None:
    closed = closed_port()
    spec = write_spec(tmp_path)
    url = ["--docker-url", f"local=tcp://127.0.0.1:{closed}"]
    code, _, err = run_cli(["status", str(spec), *url, "--insecure-docker"], capsys)
    assert code == 1 and "cannot reach the Docker engine" in err, err
    code, _, err = run_cli(["status", str(spec), *url, "--insecure-docker", "--docker-tls"], capsys)
    assert code == 2 and "contradict" in err, err


@pytest.mark.parametrize(
    ("url", "phrase"),
    [
        ("http://10.0.0.1:2375", "not a Docker engine URL"),
        ("https://10.0.0.1:2376", "not a Docker engine URL"),
        ("10.0.0.1:2375", "not a Docker engine URL"),
        ("npipe:////./pipe/docker_engine", "not a Docker engine URL"),
        ("tcp://10.0.0.1:2375", "in clear"), ("ssh://", "needs a host"),
    ],
)
def test_urls_other_than_unix_ssh_and_secured_tcp_are_usage_errors(url: str, phrase: str) -> None:
    with pytest.raises(UsageError, match=phrase):
        check("local", url, DockerAccess())


def test_unix_and_ssh_need_no_tls(tmp_path: Path) -> None:
    check("local", "unix:///var/run/docker.sock", DockerAccess())
    check("local", "ssh://ubuntu@10.0.0.1", DockerAccess())
    certs = str(make_certs(tmp_path))
    check("local", "tcp://10.0.0.1:2376", DockerAccess(tls=True, cert_path=certs))
    check("local", "tcp://10.0.0.1:2375", DockerAccess(insecure=True))


@pytest.fixture(scope="module")
def engine_socket() -> str:
    url = os.environ.get("PDCTL_TEST_DOCKER_HOST", "")
    if not url.startswith("unix://"):
        pytest.skip("no test dockerd: run `RUN=... tests/services.sh start` and source $RUN/env")
    return url[len("unix://") :]


@pytest.fixture(scope="module")
def tls_engine(engine_socket: str, tmp_path_factory: pytest.TempPathFactory):
    certs = make_certs(tmp_path_factory.mktemp("docker-tls"))
    front = TlsEngine(certs, engine_socket)
    yield front, certs
    front.close()


def test_tls_config_is_built_and_handed_to_the_real_client(tls_engine, monkeypatch) -> None:
    front, certs = tls_engine
    # requests lets these override the client's CA; the engine must be checked against ca.pem.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    monkeypatch.setenv("CURL_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    client = connect("local", front.url(), DockerAccess(tls=True, cert_path=str(certs)))
    try:
        api = client.api
        assert api.base_url == f"https://127.0.0.1:{front.port}"
        assert api.verify == str(certs / "ca.pem")
        assert api.cert == (str(certs / "cert.pem"), str(certs / "key.pem"))
        assert client.ping() is True
        assert client.version()["ApiVersion"]
    finally:
        client.close()
    assert front.served >= 1


def test_an_engine_certificate_from_another_ca_is_refused(tls_engine, tmp_path: Path) -> None:
    front, _ = tls_engine
    other = make_certs(tmp_path / "other", ca_name="some other CA")
    refused = front.refused
    with pytest.raises(PdctlError, match="cannot reach the Docker engine.*(CERTIFICATE|certif)"):
        connect("local", front.url(), DockerAccess(tls=True, cert_path=str(other)))
    assert front.wait_refused(refused) > refused


def test_missing_certificates_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no CA certificate"):  # before anything connects
        check("local", "tcp://127.0.0.1:1", DockerAccess(tls=True, cert_path=str(tmp_path)))
    with pytest.raises(UsageError, match="no CA certificate"):
        connect("local", "tcp://127.0.0.1:1", DockerAccess(tls=True, cert_path=str(tmp_path)))
    certs = make_certs(tmp_path / "certs")
    (certs / "key.pem").unlink()
    with pytest.raises(UsageError, match="key.pem is missing"):
        connect("local", "tcp://127.0.0.1:1", DockerAccess(tls=True, cert_path=str(certs)))


def test_cli_status_over_tls_with_cert_path_option_and_env(
    tls_engine, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    front, certs = tls_engine
    spec = write_spec(tmp_path)
    url = ["--docker-url", f"local={front.url()}", "-o", "json"]
    code, out, err = run_cli(
        ["status", str(spec), *url, "--docker-tls", "--docker-cert-path", str(certs)], capsys
    )
    assert code == 0, err
    answer = yaml.safe_load(out)
    units = [(r["unit"], r["state"]) for r in answer["instances"]]
    assert (answer["name"], units) == ("tls", [("tls-serve-0", "not started")])
    monkeypatch.setenv("DOCKER_CERT_PATH", str(certs))
    code, out, err = run_cli(["status", str(spec), *url, "--docker-tls"], capsys)
    assert code == 0, err
    monkeypatch.setenv("DOCKER_CERT_PATH", str(tmp_path))  # no certificates there
    code, out, err = run_cli(["status", str(spec), *url, "--docker-tls"], capsys)
    assert code == 2 and "no CA certificate" in err and len(err.splitlines()) == 1, err
