"""Kubernetes failures as one line each, with what to do.

A kubeconfig pdctl cannot use is a usage error (exit 2) found before anything connects:
`check_kubeconfig` reads the files (one, or several joined by `:` as in $KUBECONFIG) as the
`kubernetes` client merges them (each name's first cluster, context and user wins; the
current-context of the last file that sets one) and names the files it read. An API call that
fails is a runtime error (exit 1): `unreachable` says why the server could not be reached
(refused, timed out, TLS, DNS), `refused` quotes the `message` of the Status the server
answered with, naming the object.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import ssl
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import yaml
from urllib3 import exceptions as u3

from pdctl.errors import PdctlError, UsageError
from pdctl.targets.kube.discovery import ApiError

FIX = "fix the file or pass another --kubeconfig"
LISTS = ("clusters", "contexts", "users")


def files_of(files: str) -> tuple[list[str], list[str]]:
    """(the files that exist, those that do not) of a `:`-joined list, in its order."""
    names = [f for f in files.split(os.pathsep) if f]
    there = [f for f in names if os.path.exists(os.path.expanduser(f))]
    return there, [f for f in names if f not in there]


def named(files: str) -> str:
    """The kubeconfig as an error line names it: the file, or the files read and those not
    found (a $KUBECONFIG list)."""
    there, missing = files_of(files)
    if len(there) == 1 and not missing:
        return there[0]
    text = f"{files} (read {', '.join(there) or 'nothing'}"
    return text + (f"; {', '.join(missing)} not found)" if missing else ")")


def yaml_error(file: str, exc: Exception) -> UsageError:
    mark = getattr(exc, "problem_mark", None)
    if isinstance(exc, yaml.MarkedYAMLError) and mark is not None:
        return UsageError(
            f"kubeconfig {file}: not valid YAML: {exc.problem} "
            f"(line {mark.line + 1}, column {mark.column + 1})",
            fix=FIX,
        )
    return UsageError(f"kubeconfig {file}: not valid YAML: {' '.join(str(exc).split())}", fix=FIX)


def _read(file: str) -> dict[str, Any]:
    """One kubeconfig file as a mapping, or the usage error saying why it is not one."""
    try:
        with open(os.path.expanduser(file), encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise UsageError(f"cannot read the kubeconfig {file}: {exc.strerror}", fix=FIX) from None
    except UnicodeDecodeError:
        raise UsageError(f"{file} is not a kubeconfig: not text", fix=FIX) from None
    except yaml.YAMLError as exc:
        raise yaml_error(file, exc) from None
    if data is None:
        raise UsageError(f"{file} is not a kubeconfig: the file is empty", fix=FIX)
    if not isinstance(data, dict):
        raise UsageError(
            f"{file} is not a kubeconfig: it holds a YAML {type(data).__name__}, not a mapping "
            "with clusters, contexts and users",
            fix=FIX,
        )
    for key in LISTS:
        value = data.get(key)
        if value is not None and not (
            isinstance(value, list) and all(isinstance(i, dict) and "name" in i for i in value)
        ):
            raise UsageError(
                f"{file} is not a kubeconfig: {key} must be a list of entries with a name", fix=FIX
            )
    return data


def check_kubeconfig(files: str, context: str | None) -> None:
    """Refuse (exit 2, one line naming the files read) kubeconfig files the client could
    not use: not YAML, not a mapping, no clusters, or no such context."""
    there, _ = files_of(files)
    entries: dict[str, dict[str, dict[str, Any]]] = {key: {} for key in LISTS}
    current = None
    for file in there:
        data = _read(file)
        for key in LISTS:
            for item in data.get(key) or []:
                entries[key].setdefault(str(item["name"]), item)
        if "current-context" in data:
            current = data["current-context"]
    where = named(files)
    if not entries["clusters"]:
        raise UsageError(f"{where} is not a kubeconfig: no clusters", fix=FIX)
    names = ", ".join(entries["contexts"]) or "none"
    if context is not None and context not in entries["contexts"]:
        raise UsageError(f"no context {context!r} in {where}; choose one of: {names}")
    if context is None and not current:
        raise UsageError(f"{where} sets no current-context; pass --context (one of: {names})")
    if context is None and current not in entries["contexts"]:
        raise UsageError(
            f"the current-context {current!r} of {where} is not one of its contexts; "
            f"pass --context (one of: {names})"
        )


def config_error(files: str, exc: Exception) -> PdctlError:
    """What the client's loader raised, as one line naming the files read: a YAML error's
    problem and place, a ConfigException (the file's content) as a usage error."""
    from kubernetes.config import ConfigException

    where = named(files)
    if isinstance(exc, yaml.YAMLError):
        return yaml_error(where, exc)
    text = " ".join(str(exc).split())
    for prefix in ("Invalid kube-config file.", "Invalid kube-config."):
        text = text.removeprefix(prefix).strip()
    if isinstance(exc, ConfigException):
        return UsageError(f"kubeconfig {where}: {text}", fix=FIX)
    return PdctlError(f"cannot load the kubeconfig {where}: {text}")


def _cause(exc: BaseException) -> str:
    """Why a connection failed, in a few words."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:  # the chain: MaxRetryError.reason, __cause__, __context__, args
        e = todo.pop(0)
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        more = [getattr(e, "reason", None), e.__cause__, e.__context__, *e.args]
        todo += [a for a in more if isinstance(a, BaseException)]
    for e in seen:
        if isinstance(e, (u3.SSLError, ssl.SSLError)):
            inner = next((s for s in seen if isinstance(s, ssl.SSLError)), e)
            why = getattr(inner, "reason", None) or getattr(inner, "verify_message", None)
            return f"TLS failed: {why or ' '.join(str(inner).split())}"
    for e in seen:
        if isinstance(e, (socket.gaierror, u3.NameResolutionError)):
            return "DNS: the host name does not resolve"
        if isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED:
            return "connection refused"
        if getattr(e, "errno", None) in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return "no route to the host"
    for e in seen:  # (urllib3's NewConnectionError is a ConnectTimeoutError: checked last)
        if isinstance(e, u3.NewConnectionError):
            continue
        if isinstance(e, (u3.ConnectTimeoutError, u3.ReadTimeoutError, TimeoutError)):
            return "timed out"
        if isinstance(e, (u3.ProtocolError, ConnectionResetError, ConnectionAbortedError)):
            return "the server closed the connection"
    last = seen[-1] if seen else exc
    return f"{type(last).__name__}: {' '.join(str(last).split())}"


def with_applied(text: str, applied: Sequence[str]) -> str:
    """An error line that says which objects this run applied before it failed."""
    if not applied:
        return text
    return (
        f"{text}; already applied, left in place: {', '.join(applied)} (`pdctl down` removes them)"
    )


class Applied(PdctlError):
    """A failed call whose line names `applied`: the objects (`Kind/name`) this run had
    applied before it, which stay applied (set by naming_applied)."""

    applied: Sequence[str] = ()

    def __str__(self) -> str:
        return with_applied(super().__str__(), self.applied)


class Unreached(Applied):
    """No HTTP answer."""


class Refused(Applied, ApiError):
    """The API server answered a call with an error status."""


@contextmanager
def naming_applied(done: list[tuple[str, str]]) -> Iterator[None]:
    """Around one object's apply in an apply loop (`done`: (kind, name) applied so far): a
    call that fails in it names what was applied before (the objects stay applied)."""
    try:
        yield
    except (Refused, Unreached) as exc:
        exc.applied = [f"{kind}/{name}" for kind, name in done]
        raise


def unreachable(host: str, exc: BaseException) -> Unreached:
    """A call that got no HTTP answer (which call matters less than where it went)."""
    return Unreached(
        f"cannot reach the Kubernetes API at {host} ({_cause(exc)}); check --kubeconfig/--context"
    )


def _object(body: Any, path: str, status: dict[str, Any]) -> str:
    """`Kind/name` of the object a call was about: from the body sent, else the Status's
    details, else the path."""
    if isinstance(body, dict) and body.get("kind"):
        return f"{body['kind']}/{(body.get('metadata') or {}).get('name', '?')}"
    details = status.get("details") or {}
    if isinstance(details, dict) and details.get("name"):
        return f"{details.get('kind') or 'object'}/{details['name']}"
    return path


def refused(method: str, path: str, code: int, reason: str, data: Any, body: Any) -> Refused:
    """A call answered with an error status: the Status's message (not the whole JSON)."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data or "")
    try:
        status = json.loads(text)
    except ValueError:
        status = None
    if not isinstance(status, dict):
        status = {}
    message = status.get("message") if isinstance(status.get("message"), str) else None
    what = _object(body, path, status)
    if message is None:
        message = " ".join(text.split())[:300] or "(no message)"
    return Refused(
        f"the Kubernetes API refused {what} ({method}: {code} {reason}): "
        f"{' '.join(message.split())}",
        code,
    )
