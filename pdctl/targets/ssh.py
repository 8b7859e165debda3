"""SSH connections (paramiko): one per host, reused; host keys checked against known_hosts.

Unknown host keys are refused unless the caller accepts new keys explicitly (recorded in
known_hosts except on a dry run); a key that differs from the known one, or is revoked
(`@revoked`, see host_keys.py), is always refused. paramiko is imported lazily.
"""

from __future__ import annotations

import getpass
import logging
import os
import shlex
import socket
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdctl.errors import PdctlError, UsageError
from pdctl.spec.model import Host
from pdctl.targets import host_keys

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
# How a command runs: sshd hands it to the login shell, which (bash) sources ~/.bashrc and
# then execs this bash in its place; that bash would source ~/.bashrc a second time (same
# shell level, run by sshd) but for --norc. What ~/.bashrc exports is inherited either way.
BASH = "bash --norc -c "
STATUS_GRACE = 5.0  # seconds stream() waits, after the output ends, for the exit status


@dataclass(frozen=True)
class SshOptions:
    """How to reach hosts: known_hosts file, whether to accept unknown keys, timeouts."""

    known_hosts: str = DEFAULT_KNOWN_HOSTS
    accept_new_host_keys: bool = False
    connect_timeout: float = 10.0
    identity_file: str | None = None
    # With accept_new_host_keys: record accepted keys in known_hosts (False on a dry run,
    # which trusts them for that run only).
    write_known_hosts: bool = True
    # A connected host that answers nothing (not even SSH keepalives) for this long is lost:
    # every operation on it then fails at once with HostLost instead of hanging.
    lost_after: float = 30.0


class Unreachable(PdctlError):
    """A host that pdctl cannot connect or log in to (network, SSH handshake, credentials)."""


class HostLost(Unreachable):
    """A connected host that stopped answering, or whose connection closed, during `step`."""

    def __init__(self, message: str, host: str, step: str) -> None:
        super().__init__(message)
        self.host = host
        self.step = step


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


def _policy(options: SshOptions, known: host_keys.KnownHosts, host: Host) -> Any:
    """For a key not in known_hosts: refuse a revoked key (always), refuse an unknown one, or
    with --accept-new-host-keys trust it and record it in known_hosts (not on a dry run)."""
    import paramiko

    class Policy(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            who = f"host {host.name} ({hostname})"
            revoked = known.revoked_line(key)
            if revoked is not None:
                raise PdctlError(
                    f"{who}: its host key is revoked ({known.path}:{revoked}: "
                    "@revoked); refusing to connect"
                )
            if not options.accept_new_host_keys:
                ca = known.authority_line(hostname)
                why = (
                    f" ({known.path}:{ca} trusts a host certificate authority for it, "
                    "@cert-authority, which pdctl cannot check)"
                    if ca is not None
                    else ""
                )
                raise PdctlError(
                    f"{who}: unknown host key, not in {known.path}{why}; refusing to connect. "
                    "Check the key and add it (ssh-keyscan), or pass --accept-new-host-keys"
                )
            if options.write_known_hosts:
                path = Path(os.path.expanduser(options.known_hosts))
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a", encoding="utf-8") as fh:
                    fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
            client.get_host_keys().add(hostname, key.get_name(), key)

    return Policy()


def _identity(host: Host, options: SshOptions) -> str | None:
    """The identity file to log in with (`~` expanded), checked before connecting."""
    given = host.identity_file or options.identity_file
    if not given:
        return None
    path = os.path.expanduser(given)
    what = (
        f"host {host.name}: identityFile {given}" if host.identity_file else f"--identity {given}"
    )
    fix = (
        "fix hosts[].identityFile in the spec"
        if host.identity_file
        else "pass an existing private key (or unset PDCTL_SSH_IDENTITY)"
    )
    if not os.path.isfile(path):
        raise UsageError(f"{what}: no such file", fix=fix)
    if not os.access(path, os.R_OK):
        raise UsageError(f"{what}: not readable by this user", fix=fix)
    return path


@dataclass
class Connection:
    """One SSH connection to one host, shared by every operation on that host."""

    host: Host
    options: SshOptions
    client: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _home: str | None = None
    lost: HostLost | None = None

    def connect(self) -> Connection:
        import paramiko

        # Refused port-forward channels (a server still starting) are expected; they surface
        # as exceptions where they matter, not as log noise on stderr.
        logging.getLogger("paramiko").setLevel(logging.CRITICAL)

        key_file = _identity(self.host, self.options)
        client = paramiko.SSHClient()
        known = host_keys.load(self.options.known_hosts, client.get_host_keys())
        client.set_missing_host_key_policy(_policy(self.options, known, self.host))
        user = self.host.user or getpass.getuser()
        try:
            client.connect(
                self.host.address, port=self.host.port, username=user,
                key_filename=key_file, look_for_keys=key_file is None, allow_agent=key_file is None,
                timeout=self.options.connect_timeout, banner_timeout=self.options.connect_timeout,
                auth_timeout=self.options.connect_timeout,
            )
        except PdctlError:  # the host-key policy refused the key
            client.close()
            raise
        except paramiko.BadHostKeyException:
            client.close()
            raise PdctlError(
                f"host {self.host.name} ({_host_key_name(self.host)}): its host key does not "
                f"match the one in {self.options.known_hosts}; refusing to connect "
                "(if the host was reinstalled, remove the old key with `ssh-keygen -R`)"
            ) from None
        except (paramiko.SSHException, TimeoutError, OSError) as exc:
            login = isinstance(exc, paramiko.AuthenticationException)
            how = f"cannot log in as {user}" if login else "cannot connect"
            raise Unreachable(f"{self.where()}: {how}: {_cause(exc)}") from None
        transport = client.get_transport()
        if transport is not None:
            # Keepalives every few seconds, and the kernel gives up on data unacknowledged for
            # lost_after seconds: a host whose link or sshd died ends the connection in time.
            transport.set_keepalive(max(1, int(self.options.lost_after // 6)))
            tcp_user_timeout = getattr(socket, "TCP_USER_TIMEOUT", None)
            if tcp_user_timeout is not None and isinstance(transport.sock, socket.socket):
                ms = int(self.options.lost_after * 1000)
                transport.sock.setsockopt(socket.IPPROTO_TCP, tcp_user_timeout, ms)
        self.client = client
        self.lost = None
        return self

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def where(self) -> str:
        return f"host {self.host.name} ({self.host.address}:{self.host.port})"

    def fail(self, step: str, cause: BaseException | str) -> HostLost:
        """Mark the connection lost (every later operation fails at once) and say why."""
        if self.lost is None:
            why = cause if isinstance(cause, str) else _cause(cause)
            if isinstance(cause, TimeoutError):
                why = "no answer"
            self.lost = HostLost(
                f"{self.where()}: connection lost while {step or 'talking to it'} ({why})",
                self.host.name, step,
            )
            if self.client is not None:
                self.client.close()
        return self.lost

    def session(self, step: str = "") -> Any:
        """A new channel; HostLost when the host no longer answers."""
        import paramiko

        if self.lost is not None:
            raise self.lost
        assert self.client is not None, "not connected"
        transport = self.client.get_transport()
        if transport is None or not self.active():
            raise self.fail(step, "the connection closed")
        try:
            return transport.open_session(timeout=self.options.connect_timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise self.fail(step, exc) from None

    def run(self, command: str, timeout: float = 600.0, step: str = "") -> Result:
        """Run a command through `bash -c` and collect its exit status and output.

        At most `timeout` seconds (then a PdctlError naming host and step; the connection
        stays usable); HostLost when the connection dies meanwhile."""
        import paramiko

        chan = self.session(step)
        try:
            chan.exec_command(BASH + shlex.quote(command))
            chan.shutdown_write()
            out, err = _read_all(chan, time.monotonic() + timeout)
        except TimeoutError:
            chan.close()
            raise PdctlError(
                f"{self.where()}: {step or 'a command'}: no result after {timeout:g} s"
            ) from None
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise self.fail(step, exc) from None
        rc = chan.recv_exit_status()
        chan.close()
        if rc == -1 and not self.active():  # closed without an exit status: the link died
            raise self.fail(step, "the connection closed")
        return Result(rc, out, err)

    def active(self) -> bool:
        transport = self.client.get_transport() if self.client is not None else None
        return transport is not None and transport.is_active()

    def stream(self, command: str, write: Any, step: str = "following the log") -> int:
        """Run a command and pass its output to `write` as it arrives (for `logs -f`)."""
        chan = self.session(step)
        chan.get_pty()
        chan.exec_command(BASH + shlex.quote(command))
        try:
            while True:
                data = chan.recv(32768)
                if not data:
                    break
                write(data.decode("utf-8", "replace"))
            # The exit status may arrive just after the output's end: wait for it a little
            # (read at once, `logs -f` of a unit with no log sometimes read 0).
            chan.status_event.wait(STATUS_GRACE)
        finally:
            chan.close()
        rc = chan.recv_exit_status() if chan.exit_status_ready() else 0
        if rc == -1 and not self.active():
            raise self.fail(step, "the connection closed")
        return max(rc, 0)

    def home(self) -> str:
        if self._home is None:
            with self._lock:
                sftp = self.sftp("finding the home folder")
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

    def sftp(self, step: str = "", timeout: float = 120.0) -> Any:
        """An SFTP session whose every request gives up after `timeout` seconds."""
        import paramiko

        chan = self.session(step)
        try:
            chan.settimeout(timeout)
            chan.invoke_subsystem("sftp")
            return paramiko.SFTPClient(chan)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise self.fail(step, exc) from None

    def open_channel(self, port: int, address: str = "127.0.0.1", timeout: float = 10.0) -> Any:
        """A TCP channel to address:port as seen from the host (SSH port forwarding)."""
        if self.lost is not None:
            raise self.lost
        transport = self.client.get_transport()
        return transport.open_channel(
            "direct-tcpip", (address, port), ("127.0.0.1", 0), timeout=timeout
        )


def _read_all(chan: Any, deadline: float) -> tuple[str, str]:
    """Everything a command prints until EOF; TimeoutError past `deadline`."""
    out: list[bytes] = []
    err: list[bytes] = []
    exited = 0.0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError
        ended, exited = finished(chan, exited)  # asked before reading: see finished()
        if drain(chan, out.append, err.append):
            continue
        if ended:
            break
        pause(chan, exited)
    return b"".join(out).decode("utf-8", "replace"), b"".join(err).decode("utf-8", "replace")


# Seconds to wait for output after the exit status when the channel sees no EOF (a command
# left a process holding its output open).
EXIT_GRACE = 2.0


def drain(chan: Any, out: Callable[[bytes], object], err: Callable[[bytes], object]) -> bool:
    """Hand what the channel has ready to `out` (stdout) and `err` (stderr); True if any came."""
    got = False
    while chan.recv_ready():
        out(chan.recv(65536))
        got = True
    while chan.recv_stderr_ready():
        err(chan.recv_stderr(65536))
        got = True
    return got


def finished(chan: Any, exited: float) -> tuple[bool, float]:
    """Whether a channel's output is complete, and when its exit status came (0: not yet).
    Ask BEFORE reading what is buffered (asked after, output could be left unread): the
    output is complete at EOF; it may follow the exit status, hence a grace after that."""
    if chan.eof_received or chan.closed:
        return True, exited
    if chan.exit_status_ready():
        exited = exited or time.monotonic()
        return time.monotonic() - exited > EXIT_GRACE, exited
    return False, exited


def pause(chan: Any, exited: float) -> None:
    """Wait a little for more output (the status event stays set after the exit status)."""
    if exited:
        time.sleep(0.02)
    else:
        chan.status_event.wait(0.05)


def put_file(sftp: Any, path: str, data: bytes, mode: int) -> None:
    """Write a file over SFTP with `mode` set before any content lands (secrets stay 0600)."""
    tmp = path + ".pdctl-tmp"
    with sftp.open(tmp, "wb") as fh:
        fh.chmod(mode)
        fh.write(data)
    sftp.chmod(tmp, mode)
    sftp.posix_rename(tmp, path)


def _is_folder(sftp: Any, path: str) -> bool:
    try:
        return stat.S_ISDIR(sftp.stat(path).st_mode or 0)
    except OSError:
        return False


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
            try:
                sftp.mkdir(current, mode=0o700)
            except OSError:
                # Made meanwhile by someone else (another host's pdctl session on a shared
                # filesystem, such as an NFS home): fine when it is a folder now.
                if not _is_folder(sftp, current):
                    raise
    sftp.chmod(path, mode)
