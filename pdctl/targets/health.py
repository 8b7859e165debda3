"""Health of one engine or router: `/health` 200 and the model listed in `/v1/models`.

Requests go over the SSH connection (port forwarding), so nothing needs curl on the host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Health:
    ok: bool
    detail: str
    models: tuple[str, ...] = ()


def http_get(
    channel: Any, path: str, host: str = "127.0.0.1", timeout: float = 10.0
) -> tuple[int, str]:
    """One HTTP/1.0 GET over an open socket-like channel; returns (status, body)."""
    channel.settimeout(timeout)
    try:
        request = f"GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: */*\r\nConnection: close\r\n"
        channel.sendall((request + "\r\n").encode())
        chunks = []
        while True:
            data = channel.recv(65536)
            if not data:
                break
            chunks.append(data)
    finally:
        channel.close()
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        return 0, raw.decode("utf-8", "replace")
    return int(parts[1]), body.decode("utf-8", "replace")


def model_ids(body: str) -> tuple[str, ...]:
    try:
        data = json.loads(body)
        return tuple(str(m.get("id")) for m in data.get("data", []))
    except (ValueError, AttributeError, TypeError):
        return ()


def probe(open_channel: Any, model: str, health_path: str = "/health") -> Health:
    """`open_channel()` returns a fresh channel to the server each time it is called."""
    try:
        status, _ = http_get(open_channel(), health_path)
    except Exception as exc:  # connection refused, reset, timeout: not up yet
        return Health(False, f"no answer ({type(exc).__name__})")
    if status != 200:
        return Health(False, f"{health_path} answered {status}")
    try:
        status, body = http_get(open_channel(), "/v1/models")
    except Exception as exc:
        return Health(False, f"/v1/models: no answer ({type(exc).__name__})")
    if status != 200:
        return Health(False, f"/v1/models answered {status}")
    models = model_ids(body)
    if model not in models:
        return Health(False, f"model {model!r} not listed (got {list(models)})", models)
    return Health(True, "healthy", models)
