"""How pdctl reaches a Docker engine (`--docker-url HOST=URL`): the one place that decides
whether a URL may be used and how the connection is secured.

- `unix://PATH`: the local socket (its file permissions guard it).
- `ssh://[USER@]HOST[:PORT]`: pdctl's own SSH connection (targets/ssh.py), with the same host-key
  policy as every other SSH host: keys checked against --known-hosts, an unknown key refused
  unless --accept-new-host-keys, a changed key always refused; --identity or the host's
  identityFile. The docker SDK's paramiko transport is handed that connection instead of
  opening its own (which would trust ~/.ssh/known_hosts only and ignore pdctl's options).
- `tcp://HOST:PORT`: `up` sends HF_TOKEN and the API key to the engine as container environment,
  so plain tcp:// (no encryption, no authentication) is refused unless --insecure-docker;
  --docker-tls verifies the engine's certificate against `ca.pem` and presents `cert.pem` and
  `key.pem` from --docker-cert-path, $DOCKER_CERT_PATH or ~/.docker, as `docker --tlsverify`
  does.
Anything else (http://, https://, a bare HOST:PORT, npipe://) is a usage error.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests

from pdctl.errors import PdctlError, UsageError
from pdctl.spec.model import Host
from pdctl.targets.ssh import Connection, SshOptions

DEFAULT_CERT_PATH = "~/.docker"
SCHEMES = ("unix", "ssh", "tcp")
TLS_FIX = (
    "add --docker-tls (with ca.pem, cert.pem and key.pem in --docker-cert-path DIR or "
    "$DOCKER_CERT_PATH), use ssh://, or pass --insecure-docker on a network you trust"
)


@dataclass(frozen=True)
class DockerAccess:
    """The command line's choices for reaching Docker engines."""

    tls: bool = False  # --docker-tls: tcp:// URLs use TLS and verify the engine
    cert_path: str = DEFAULT_CERT_PATH  # --docker-cert-path / $DOCKER_CERT_PATH
    insecure: bool = False  # --insecure-docker: plain tcp:// allowed
    ssh: SshOptions = field(default_factory=SshOptions)  # ssh:// host keys and identity


def scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def check(name: str, url: str, access: DockerAccess) -> None:
    """UsageError unless `url` (the Docker engine of host `name`) may be used as `access`
    says. Called before any connection is made."""
    flag = f"--docker-url {name}={url}"
    if access.tls and access.insecure:
        raise UsageError(
            "--docker-tls and --insecure-docker contradict each other", fix="keep --docker-tls"
        )
    kind = scheme(url)
    if kind not in SCHEMES:
        raise UsageError(
            f"{flag}: not a Docker engine URL pdctl uses",
            fix="give unix:///PATH, ssh://[USER@]HOST[:PORT] or tcp://HOST:PORT",
        )
    parts = urlsplit(url)
    if kind in ("ssh", "tcp") and (not parts.hostname or parts.path not in ("", "/")):
        raise UsageError(
            f"{flag}: {kind}:// needs a host and no path",
            fix=f"give {kind}://{'[USER@]' if kind == 'ssh' else ''}HOST[:PORT]",
        )
    if kind == "tcp" and not access.tls and not access.insecure:
        raise UsageError(
            f"{flag}: plain tcp:// to {parts.netloc} is unencrypted and "
            "unauthenticated: pdctl would send HF_TOKEN and the API key in clear",
            fix=TLS_FIX,
        )
    if kind == "tcp" and access.tls:
        tls_config(access)  # the certificate files, checked before anything connects


def tls_config(access: DockerAccess) -> Any:
    """The docker SDK's TLSConfig for --docker-tls: verify the engine against ca.pem; present
    cert.pem and key.pem when both are there (as the docker CLI does)."""
    from docker.tls import TLSConfig

    folder = os.path.expanduser(access.cert_path)
    ca, cert, key = (os.path.join(folder, f) for f in ("ca.pem", "cert.pem", "key.pem"))
    if not os.path.isfile(ca):
        raise UsageError(
            f"--docker-tls: no CA certificate {ca} to verify the Docker engine with",
            fix="put ca.pem (and cert.pem, key.pem) in --docker-cert-path DIR",
        )
    client = os.path.isfile(cert), os.path.isfile(key)
    if any(client) and not all(client):
        missing = key if client[0] else cert
        raise UsageError(
            f"--docker-tls: {missing} is missing (cert.pem and key.pem go together)",
            fix="add it, or remove the other",
        )
    return TLSConfig(client_cert=(cert, key) if all(client) else None, ca_cert=ca, verify=True)


def connect(name: str, url: str, access: DockerAccess, host: Any = None) -> Any:
    """A docker.DockerClient for the engine of host `name` at `url` (checked first). `host` is
    the spec's host (its user and identityFile apply to ssh:// when the URL names none)."""
    check(name, url, access)
    import docker

    if scheme(url) == "ssh":
        return _over_ssh(name, url, access, host)
    tls = tls_config(access) if scheme(url) == "tcp" and access.tls else False

    def client(version: str) -> Any:
        made = docker.DockerClient(base_url=url, tls=tls, use_ssh_client=False, version=version)
        # Before any request: requests would otherwise verify the engine against
        # $REQUESTS_CA_BUNDLE or $CURL_CA_BUNDLE instead of ca.pem, and go through $HTTPS_PROXY.
        made.api.trust_env = False
        return made

    return _negotiated(client, url, "")


def _negotiated(client: Callable[[str], Any], url: str, how: str) -> Any:
    """`client(version)` makes a client that sends nothing yet; ask the engine for its API
    version and return a client of min(engine's, the SDK's) version."""
    import docker
    from docker.constants import DEFAULT_DOCKER_API_VERSION, MINIMUM_DOCKER_API_VERSION
    from docker.utils import version_lt

    try:
        probe = client(MINIMUM_DOCKER_API_VERSION)
        server = probe.api.version(api_version=False)["ApiVersion"]
        best = server if version_lt(server, DEFAULT_DOCKER_API_VERSION) else None
        made = client(best or DEFAULT_DOCKER_API_VERSION)
    except (docker.errors.DockerException, requests.RequestException, KeyError) as exc:
        raise PdctlError(f"cannot reach the Docker engine at {url}{how}: {exc}") from None
    adapter: Any = getattr(probe.api, "_custom_adapter", None)
    if hasattr(adapter, "ssh_client"):
        adapter.ssh_client = None  # shared with `made`: close only the probe's channels
    probe.close()
    return made


def _over_ssh(name: str, url: str, access: DockerAccess, host: Any) -> Any:
    """The SDK's ssh:// transport, running `docker system dial-stdio` on pdctl's connection."""
    import docker


    parts = urlsplit(url)
    where = {"address": parts.hostname, "port": parts.port or 22}
    if host is None:
        host = Host.model_construct(name=name, address=parts.hostname or "", user=parts.username)
    where["user"] = parts.username or host.user
    conn = Connection(host.model_copy(update=where), access.ssh).connect()

    def client(version: str) -> Any:
        # use_ssh_client=True makes the SDK open no connection of its own; with ssh_client set,
        # its adapter opens its channels on pdctl's (host-key-checked) connection instead.
        made = docker.DockerClient(base_url=url, version=version, use_ssh_client=True)
        made.api._custom_adapter.ssh_client = conn.client
        return made

    try:
        return _negotiated(
            client, url, f" (over SSH to {parts.hostname}: `docker system dial-stdio`)"
        )
    except PdctlError:
        conn.close()
        raise
