"""SSH connections (paramiko): one per host, reused; host keys checked against known_hosts.

Unknown host keys are refused unless the caller accepts new keys explicitly; a key that
differs from the known one is always refused. paramiko is imported only here, lazily.
"""

from __future__ import annotations

import os
import shlex
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdctl.errors import PdctlError
from pdctl.spec.model import Host

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


@dataclass(frozen=True)
class SshOptions:
    """How to reach hosts: known_hosts file, whether to accept unknown keys, timeouts."""

    known_hosts: str = DEFAULT_KNOWN_HOSTS
    accept_new_host_keys: bool = False
    connect_timeout: float = 10.0
    identity_file: str | None = None


class Unreachable(PdctlError):
    """A host that pdctl cannot connect or log in to (network, SSH handshake, credentials)."""


def _cause(exc: BaseException) -> str:
    """The reason in a few words: `timed out`, `Connection refused`, paramiko's message."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).strip().rstrip(".") or type(exc).__name__


@dataclass
class Result:
    rc: int
    out: str
    err: str


def _host_key_name(host: Host) -> str:
    return host.address if host.port == 22 else f"[{host.address}]:{host.port}"


def _policy(options: SshOptions) -> Any:
    """Reject unknown keys, or (with --accept-new-host-keys) record them in known_hosts."""
    import paramiko

    class AcceptNew(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            path = Path(os.path.expanduser(options.known_hosts))
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as fh:
                fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
            client.get_host_keys().add(hostname, key.get_name(), key)

    if options.accept_new_host_keys:
        return AcceptNew()
    return paramiko.RejectPolicy()


@dataclass
class Connection:
    """One SSH connection to one host, shared by every operation on that host."""

    host: Host
    options: SshOptions
    client: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _home: str | None = None

    def connect(self) -> Connection:
        import logging

        import paramiko

        # Refused port-forward channels (a server still starting) are expected; they surface
        # as exceptions where they matter, not as log noise on stderr.
        logging.getLogger("paramiko").setLevel(logging.CRITICAL)

        client = paramiko.SSHClient()
        known = os.path.expanduser(self.options.known_hosts)
        if os.path.exists(known):
            client.load_host_keys(known)
        client.set_missing_host_key_policy(_policy(self.options))
        key_file = self.host.identity_file or self.options.identity_file
        try:
            client.connect(
                self.host.address,
                port=self.host.port,
                username=self.host.user or _local_user(),
                key_filename=os.path.expanduser(key_file) if key_file else None,
                look_for_keys=key_file is None,
                allow_agent=key_file is None,
                timeout=self.options.connect_timeout,
                banner_timeout=self.options.connect_timeout,
                auth_timeout=self.options.connect_timeout,
            )
        except paramiko.BadHostKeyException:
            raise PdctlError(
                f"host {self.host.name} ({_host_key_name(self.host)}): its host key does not "
                f"match the one in {self.options.known_hosts}; refusing to connect "
                "(if the host was reinstalled, remove the old key with `ssh-keygen -R`)"
            ) from None
        except paramiko.SSHException as exc:
            if "not found in known_hosts" in str(exc):
                raise PdctlError(
                    f"host {self.host.name} ({_host_key_name(self.host)}): unknown host key, "
                    f"not in {self.options.known_hosts}; refusing to connect. Check the key "
                    "and add it (ssh-keyscan), or pass --accept-new-host-keys"
                ) from None
            where = f"host {self.host.name} ({self.host.address}:{self.host.port})"
            if isinstance(exc, paramiko.AuthenticationException):
                raise Unreachable(f"{where}: cannot log in as {self.host.user or _local_user()}: "
                                  f"{_cause(exc)}") from None
            raise Unreachable(f"{where}: cannot connect: {_cause(exc)}") from None
        except (TimeoutError, OSError) as exc:
            where = f"host {self.host.name} ({self.host.address}:{self.host.port})"
            raise Unreachable(f"{where}: cannot connect: {_cause(exc)}") from None
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(15)
        self.client = client
        return self

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def run(self, command: str, timeout: float = 600.0) -> Result:
        """Run a command through `bash -c` and collect its exit status and output."""
        assert self.client is not None, "not connected"
        transport = self.client.get_transport()
        chan = transport.open_session(timeout=self.options.connect_timeout)
        chan.settimeout(timeout)
        chan.exec_command("bash -c " + shlex.quote(command))
        chan.shutdown_write()
        out, err = _read_all(chan)
        rc = chan.recv_exit_status()
        chan.close()
        return Result(rc, out, err)

    def stream(self, command: str, write: Any) -> int:
        """Run a command and pass its output to `write` as it arrives (for `logs -f`)."""
        assert self.client is not None
        chan = self.client.get_transport().open_session()
        chan.get_pty()
        chan.exec_command("bash -c " + shlex.quote(command))
        try:
            while True:
                data = chan.recv(32768)
                if not data:
                    break
                write(data.decode("utf-8", "replace"))
        finally:
            chan.close()
        return chan.recv_exit_status() if chan.exit_status_ready() else 0

    def home(self) -> str:
        if self._home is None:
            with self._lock:
                sftp = self.client.open_sftp()
                try:
                    self._home = sftp.normalize(".")
                finally:
                    sftp.close()
        return self._home

    def expand(self, path: str) -> str:
        """A host path with a leading `~/` resolved to the SSH user's home."""
        if path == "~":
            return self.home()
        if path.startswith("~/"):
            return self.home().rstrip("/") + "/" + path[2:]
        return path

    def sftp(self) -> Any:
        assert self.client is not None
        return self.client.open_sftp()

    def open_channel(self, port: int, address: str = "127.0.0.1", timeout: float = 10.0) -> Any:
        """A TCP channel to address:port as seen from the host (SSH port forwarding)."""
        transport = self.client.get_transport()
        return transport.open_channel(
            "direct-tcpip", (address, port), ("127.0.0.1", 0), timeout=timeout
        )


def _read_all(chan: Any) -> tuple[str, str]:
    out: list[bytes] = []
    err: list[bytes] = []
    while True:
        if chan.recv_ready():
            out.append(chan.recv(65536))
            continue
        if chan.recv_stderr_ready():
            err.append(chan.recv_stderr(65536))
            continue
        if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
            break
        chan.status_event.wait(0.05)
        if chan.closed:
            break
    # drain what is left after the exit status
    while chan.recv_ready():
        out.append(chan.recv(65536))
    while chan.recv_stderr_ready():
        err.append(chan.recv_stderr(65536))
    return b"".join(out).decode("utf-8", "replace"), b"".join(err).decode("utf-8", "replace")


def _local_user() -> str:
    import getpass

    return getpass.getuser()


def put_file(sftp: Any, path: str, data: bytes, mode: int) -> None:
    """Write a file over SFTP with `mode` set before any content lands (secrets stay 0600)."""
    tmp = path + ".pdctl-tmp"
    with sftp.open(tmp, "wb") as fh:
        fh.chmod(mode)
        fh.write(data)
    sftp.chmod(tmp, mode)
    sftp.posix_rename(tmp, path)


def makedirs(sftp: Any, path: str, mode: int) -> None:
    """mkdir -p over SFTP; the last component gets `mode`."""
    parts = path.rstrip("/").split("/")
    current = ""
    for i, part in enumerate(parts):
        if not part:
            current = "/" if i == 0 else current
            continue
        current = current.rstrip("/") + "/" + part
        try:
            sftp.stat(current)
        except FileNotFoundError:
            sftp.mkdir(current, mode=0o700)
    sftp.chmod(path, mode)
