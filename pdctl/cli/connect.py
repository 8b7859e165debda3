"""The connection options, declared once: SSH (known_hosts, new host keys, identity, timeout,
parallel), Docker (--docker-url and its TLS options) and Kubernetes (--kubeconfig, --context).

`@connection()` adds them to a command and hands the command one `ConnectFlags` (argument
`conn`); `up`, `down`, `status`, `logs` and `preflight` all take it, so their options cannot
drift apart. The text of the flags (HOST=URL, bridge|host) is parsed here, not in targets/.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, get_type_hints

import typer

from pdctl.cli.options import with_params
from pdctl.errors import UsageError
from pdctl.targets.base import Connect
from pdctl.targets.ssh import DEFAULT_KNOWN_HOSTS, SshOptions

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ConnectFlags:
    """The connection options as given on the command line."""

    known_hosts: str | None = None
    accept_new_host_keys: bool = False
    identity: str | None = None
    connect_timeout: float = 10.0
    parallel: int = 8
    docker_url: list[str] = field(default_factory=list)
    docker_tls: bool = False
    docker_cert_path: str | None = None
    insecure_docker: bool = False
    kubeconfig: str | None = None
    context: str | None = None

    def ssh(self, dry_run: bool = False) -> SshOptions:
        """SSH options; a dry run trusts new keys (with --accept-new-host-keys) without
        writing known_hosts."""
        if self.known_hosts and not self.accept_new_host_keys:
            must_exist(
                self.known_hosts, "known_hosts file",
                "give the file that holds the hosts' keys (ssh-keyscan HOST >> FILE), or pass "
                "--accept-new-host-keys to record them there")
        return SshOptions(
            known_hosts=self.known_hosts or DEFAULT_KNOWN_HOSTS,
            accept_new_host_keys=self.accept_new_host_keys, identity_file=self.identity,
            connect_timeout=self.connect_timeout, write_known_hosts=not dry_run)

    def target(self, dry_run: bool = False) -> Connect:
        """How to reach the plan's target (pdctl.targets.open_target)."""
        return Connect(
            ssh=self.ssh(dry_run), parallel=self.parallel, docker_urls=docker_urls(self.docker_url),
            docker_tls=self.docker_tls, docker_cert_path=self.docker_cert_path,
            insecure_docker=self.insecure_docker, kubeconfig=self.kube_file, context=self.context)

    @property
    def kube_file(self) -> str | None:
        """--kubeconfig, else $KUBECONFIG (None: neither; the client's ~/.kube/config). Whether
        it exists is checked where it is loaded (pdctl.targets.kube.api.api_client): only a
        Kubernetes target reads it."""
        return self.kubeconfig or os.environ.get("KUBECONFIG") or None


def must_exist(path: str, what: str, fix: str) -> None:
    """A file named on the command line must be there (`~` expanded): else exit 2."""
    if not os.path.exists(os.path.expanduser(path)):
        raise UsageError(f"{what} {path} does not exist", fix=fix)


def docker_urls(values: list[str]) -> dict[str, str]:
    """`--docker-url HOST=URL`, repeated: host -> URL."""
    out = {}
    for value in values:
        host, sep, url = value.partition("=")
        if not sep or not host or not url:
            raise UsageError(f"--docker-url takes HOST=URL (got {value!r})")
        out[host] = url
    return out


SSH = {
    "known_hosts": typer.Option(
        None, "--known-hosts", metavar="FILE", envvar="PDCTL_KNOWN_HOSTS",
        help="known_hosts file for host-key checks (default ~/.ssh/known_hosts)."),
    "accept_new_host_keys": typer.Option(
        False, "--accept-new-host-keys",
        help="Trust hosts whose key is not in known_hosts yet and record it (a changed key is "
        "always refused)."),
    "identity": typer.Option(None, "--identity", "-i", metavar="FILE", envvar="PDCTL_SSH_IDENTITY",
                             help="SSH private key for hosts that set no identityFile."),
    "connect_timeout": typer.Option(10.0, "--connect-timeout", min=0.1, metavar="SECONDS",
                                    help="Seconds to wait for each SSH connection."),
    "parallel": typer.Option(8, "--parallel", min=1, help="Hosts worked on at once.")}
DOCKER = {
    "docker_url": typer.Option(
        None, "--docker-url", metavar="HOST=URL",
        help="HOST=URL: drive the Docker engine of a `runtime: docker` host through the docker "
        "SDK (unix:///var/run/docker.sock, ssh://user@host, or tcp://HOST:PORT with "
        "--docker-tls) instead of scripts over SSH. Repeat per host."),
    "docker_tls": typer.Option(
        False, "--docker-tls",
        help="With a tcp:// --docker-url: TLS, verifying the engine's certificate against "
        "ca.pem and presenting cert.pem/key.pem from --docker-cert-path (as `docker "
        "--tlsverify` does)."),
    "docker_cert_path": typer.Option(
        None, "--docker-cert-path", metavar="DIR", envvar="DOCKER_CERT_PATH",
        help="Folder holding ca.pem, cert.pem and key.pem for --docker-tls (default "
        "~/.docker)."),
    "insecure_docker": typer.Option(
        False, "--insecure-docker",
        help="Allow a plain tcp:// --docker-url: the Docker API, HF_TOKEN and the API key "
        "travel unencrypted and unauthenticated. Only on a network you trust.")}
KUBE = {
    "kubeconfig": typer.Option(
        None, "--kubeconfig", metavar="FILE", help="kubeconfig file (default: $KUBECONFIG)."),
    "context": typer.Option(None, "--context", metavar="NAME", help="kubeconfig context.")}


def connection(docker: bool = True) -> Callable[[F], F]:
    """Add the connection options to a typer command whose parameter `conn: ConnectFlags`
    receives them (`docker=False`: no Docker options, for preflight)."""
    options = {**SSH, **(DOCKER if docker else {}), **KUBE}
    hints = get_type_hints(ConnectFlags)  # the field's type, or None where it defaults to None
    none = {name for name, opt in options.items() if opt.default is None}
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt,
                               annotation=hints[name] | None if name in none else hints[name])
             for name, opt in options.items()]

    def decorate(fn: F) -> F:
        def command(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in options}
            if given.get("docker_url") is None:
                given.pop("docker_url", None)
            return fn(*args, conn=ConnectFlags(**given), **kwargs)

        return with_params(fn, command, extra, drop="conn")  # type: ignore[return-value]

    return decorate
