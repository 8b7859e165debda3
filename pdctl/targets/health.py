"""Health of one engine or router: `/health` 200, the model listed in `/v1/models`, and the
port held by the unit itself (not by another process that answers like vLLM).

Requests go over the SSH connection (port forwarding), so nothing needs curl on the host.
With `secrets.apiKey` the engines answer 401 on /v1/* without `Authorization: Bearer <key>`
(vLLM leaves /health open): the probe sends the key in that header, from pdctl's memory,
never on a command line.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pdctl.errors import one_line

API_KEY_ENV = "VLLM_API_KEY"  # the secret's name in secrets.env; vLLM reads this variable

# How every target waits for health (hosts/health_wait.py, for SSH hosts and Docker engines).
LOOK = 5.0  # seconds between two reads of a starting unit's log (its stage and latest line)
# Seconds before the second poll round; each later pause is twice the last, up to the poll
# interval: a unit that is up in a second is seen then, one that loads for minutes costs a
# round per poll.
FIRST_PAUSE = 0.25


@dataclass(frozen=True)
class Health:
    ok: bool
    detail: str
    models: tuple[str, ...] = ()
    foreign: bool = False  # another process holds the port: waiting will not help


def http_request(
    channel: Any, method: str, path: str, body: bytes = b"", host: str = "127.0.0.1",
    timeout: float = 10.0, headers: dict[str, str] | None = None,
) -> tuple[int, str]:
    """One HTTP/1.0 request over an open socket-like channel; returns (status, body)."""
    channel.settimeout(timeout)
    try:
        request = (
            f"{method} {path} HTTP/1.0\r\nHost: {host}\r\nAccept: */*\r\nConnection: close\r\n"
        )
        for name, value in (headers or {}).items():
            request += f"{name}: {value}\r\n"
        if body:
            request += f"Content-Length: {len(body)}\r\n"
        channel.sendall((request + "\r\n").encode() + body)
        chunks = []
        while True:
            data = channel.recv(65536)
            if not data:
                break
            chunks.append(data)
    finally:
        channel.close()
    raw = b"".join(chunks)
    head, _, content = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        return 0, raw.decode("utf-8", "replace")
    return int(parts[1]), content.decode("utf-8", "replace")


def model_ids(body: str) -> tuple[str, ...]:
    try:
        data = json.loads(body)
        return tuple(str(m.get("id")) for m in data.get("data", []))
    except (ValueError, AttributeError, TypeError):
        return ()


# The SSH channel-open failure codes (RFC 4254 section 5.1) a port forward gets from the host
PROHIBITED, CONNECT_FAILED = 1, 2


def unanswered(exc: BaseException, where: str | None = None) -> str:
    """Why a request to `where` ("address:port", as the host sees it) got no answer, in words.

    Over SSH, a channel the host's sshd cannot open (paramiko's ChannelException) means: with
    "Connect failed" (direct-tcpip refused), nothing listens on that address and port; with
    "Administratively prohibited", the SSH server allows no port forwarding."""
    port = f"on {where}" if where else "on its port"
    if type(exc).__name__ == "ChannelException":
        if getattr(exc, "code", None) == PROHIBITED:
            return "the host's SSH server refuses port forwarding (AllowTcpForwarding)"
        return f"nothing listens {port}"
    if isinstance(exc, ConnectionRefusedError):
        return f"nothing listens {port}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    return type(exc).__name__


def probe(
    open_channel: Any, model: str, health_path: str = "/health", api_key: str | None = None,
    owner: Callable[[], str | None] | None = None, where: str | None = None,
) -> Health:
    """`open_channel()` returns a fresh channel to the server each time it is called; `where`
    ("address:port") names the server in a failure.

    `api_key`: sent as `Authorization: Bearer` to /v1/models. `owner()`, called once the port
    answers, names another process that holds the port (None when the unit holds it)."""
    try:
        status, _ = http_request(open_channel(), "GET", health_path)
    except Exception as exc:  # connection refused, reset, timeout: not up yet
        return Health(False, f"no answer ({unanswered(exc, where)})")
    problem = owner() if owner is not None else None
    if problem:
        return Health(False, problem, foreign=True)
    if status != 200:
        return Health(False, f"{health_path} answered {status}")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    try:
        status, body = http_request(open_channel(), "GET", "/v1/models", headers=headers)
    except Exception as exc:
        return Health(False, f"/v1/models: no answer ({unanswered(exc, where)})")
    if status == 401:
        why = ("it refused the API key (secrets.apiKey)" if api_key else "it requires an API "
               "key, and none is known (set secrets.apiKey in the spec)")
        return Health(False, f"/v1/models answered 401: {why}")
    if status != 200:
        return Health(False, f"/v1/models answered {status}")
    models = model_ids(body)
    if model not in models:
        return Health(False, f"model {model!r} not listed (got {list(models)})", models)
    return Health(True, "healthy", models)


def api_key_of(secrets_env: str) -> str | None:
    """The API key in a secrets.env (`NAME=<shell-quoted value>` lines, as `up` writes it)."""
    for line in secrets_env.splitlines():
        name, sep, value = line.partition("=")
        if sep and name == API_KEY_ENV:
            try:
                words = shlex.split(value)
            except ValueError:
                return None
            return words[0] if len(words) == 1 else None
    return None


def port_problem(listing: str, port: int, host: str, unit: str) -> str | None:
    """From the port-owner script's output: the line naming another holder of the port, or
    None when only the unit listens there (or no one does)."""
    for line in listing.splitlines():
        verdict, _, rest = line.partition("\t")
        pid, _, cmd = rest.partition("\t")
        if verdict == "other":
            who = f"pid {pid}, {cmd.strip()!r}" if cmd.strip() else f"pid {pid}"
            return one_line(
                f"port {port} on host {host} is held by another process ({who}), not by {unit}"
            )
        if verdict == "hidden":
            return (
                f"port {port} on host {host} is held by another process (one this SSH user "
                f"cannot see), not by {unit}"
            )
    return None
