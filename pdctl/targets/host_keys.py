"""known_hosts as OpenSSH writes it, markers included, for pdctl's SSH connections.

paramiko's own reader knows no markers: an `@revoked` or `@cert-authority` line either raises
(a traceback) or is skipped, so a revoked key could still be trusted. Here:
- a key on an `@revoked` line is never trusted, for any host: not when another line lists it
  as known, not with --accept-new-host-keys (stricter than OpenSSH, which matches the line's
  host patterns first);
- `@cert-authority` lines are kept aside: pdctl cannot check host certificates, so a host
  trusted only through one is unknown, and the refusal names the line;
- a line that does not parse is one usage error naming file:line (exit 2), never skipped in
  silence; key types paramiko does not know are skipped, as OpenSSH skips unknown types.
paramiko is imported lazily (only by the commands that connect).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass, field
from typing import Any

from pdctl.errors import UsageError

MARKERS = ("@cert-authority", "@revoked")


@dataclass
class KnownHosts:
    """The trusted keys (a paramiko HostKeys), the revoked ones and the CA lines of a file."""

    path: str  # as the user wrote it, for messages
    keys: Any
    revoked: dict[bytes, int] = field(default_factory=dict)  # key blob -> line number
    authorities: list[tuple[str, int]] = field(default_factory=list)  # host patterns, line

    def revoked_line(self, key: Any) -> int | None:
        """The line that revokes `key` (a paramiko PKey), or None."""
        return self.revoked.get(key.asbytes())

    def authority_line(self, host_key_name: str) -> int | None:
        """The first @cert-authority line whose host patterns match `host_key_name`."""
        for patterns, line in self.authorities:
            names = patterns.split(",")
            if any(_matches(host_key_name, p[1:]) for p in names if p[:1] == "!"):
                continue
            if any(_matches(host_key_name, p) for p in names if p[:1] != "!"):
                return line
        return None


def _matches(name: str, pattern: str) -> bool:
    """OpenSSH host patterns: `*` and `?` are the only wildcards (`[` is literal)."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, re.IGNORECASE) is not None


def load(path: str, keys: Any = None) -> KnownHosts:
    """Read `path` (`~` expanded) into `keys` (a paramiko HostKeys, e.g. an SSHClient's; a new
    one by default); a file that does not exist holds no keys."""
    import paramiko

    known = KnownHosts(path, paramiko.HostKeys() if keys is None else keys)
    real = os.path.expanduser(path)
    if not os.path.exists(real):
        return known
    try:
        with open(real, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the known_hosts file: {exc.strerror}") from None
    trusted: list[tuple[list[str], Any]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path}:{number}"
        marker = ""
        if line.startswith("@"):
            marker, _, line = line.partition(" ")
            if marker not in MARKERS:
                raise UsageError(
                    f"{where}: unknown marker {marker!r} (OpenSSH knows "
                    "@cert-authority and @revoked)",
                    fix="fix or remove the line",
                )
        fields = line.split()
        if len(fields) < 3:
            raise UsageError(
                f"{where}: expected `{marker + ' ' if marker else ''}HOSTS KEYTYPE BASE64-KEY`",
                fix="fix or remove the line",
            )
        hosts, key_type, data = fields[:3]
        try:
            blob = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise UsageError(
                f"{where}: the key is not base64", fix="fix or remove the line"
            ) from None
        if marker == "@revoked":
            known.revoked.setdefault(blob, number)
        elif marker == "@cert-authority":
            known.authorities.append((hosts, number))
        else:
            key = _key(key_type, blob, where)
            if key is not None:
                trusted.append((hosts.split(","), key))
    for names, key in trusted:
        if key.asbytes() in known.revoked:
            continue  # revoked: never trusted, so the connection reaches the refusal
        for name in names:
            known.keys.add(name, key.get_name(), key)
    return known


def _key(key_type: str, blob: bytes, where: str) -> Any:
    import paramiko
    from paramiko.pkey import UnknownKeyType

    try:
        return paramiko.PKey.from_type_string(key_type, blob)
    except UnknownKeyType:
        return None  # a type paramiko cannot use (OpenSSH skips unknown types too)
    except (paramiko.SSHException, ValueError, TypeError, IndexError):
        raise UsageError(
            f"{where}: the {key_type} key does not decode", fix="fix or remove the line"
        ) from None
