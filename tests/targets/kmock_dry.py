"""kmock with `dryRun=All` honoured, for the server-side dry run tests.

kmock 0.8 ignores the `dryRun` query parameter: a dry-run POST creates the object and a
dry-run PATCH changes it (tests/targets/kube/test_diff.py shows it). A real API server
answers a dry-run request with the object it would store and stores nothing. This emulator
does that much, and no more: the answer to a dry-run PATCH is kmock's own merge of the body
into the stored object (no server-side-apply field ownership, no defaulting, no admission),
to a dry-run POST the body itself; 404 / 409 as kmock answers them. Each request's method,
path and query are logged (`calls`), so a test can show that nothing but dry runs and reads
reached the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.targets.conftest import KubeServer, kube_server


def dry_run_emulator(base: Any, calls: list[tuple[str, str, dict[str, str]]]) -> Any:
    import aiohttp.web
    from kmock._internal import dicts, enums

    class DryRunEmulator(base):  # type: ignore[misc, valid-type]
        async def _handle(self, request: Any) -> Any:
            calls.append((request.method.value, request.url.path, dict(request.params)))
            dry = request.params.get("dryRun") == "All" and request.resource is not None
            if not dry or request.action not in (enums.action.CREATE, enums.action.UPDATE):
                return await super()._handle(request)
            data = request.data or {}
            meta = data.get("metadata") or {}
            name = request.name or meta.get("name")
            key = (request.resource, request.namespace or meta.get("namespace"), name)
            stored = self._objects[key] if key in self._objects else None
            if stored is not None and stored.deleted:
                stored = None
            if request.action == enums.action.UPDATE:
                if stored is None:
                    return aiohttp.web.json_response({"kind": "Status", "code": 404}, status=404)
                return aiohttp.web.json_response(dicts.patch_dict(stored.raw, data))
            if stored is not None:
                return aiohttp.web.json_response({"kind": "Status", "code": 409}, status=409)
            return aiohttp.web.json_response(data, status=201)

    return DryRunEmulator


@contextmanager
def dry_run_server(
    resources: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[KubeServer, list[tuple[str, str, dict[str, str]]]]]:
    """conftest's kube_server, its emulator honouring dryRun=All."""
    kmock = pytest.importorskip("kmock")
    calls: list[tuple[str, str, dict[str, str]]] = []
    with monkeypatch.context() as patch:
        honouring = dry_run_emulator(kmock.KubernetesEmulator, calls)
        patch.setattr(kmock, "KubernetesEmulator", honouring)
        server = kube_server(resources)
        srv = server.__enter__()
    try:
        yield srv, calls
    finally:
        server.__exit__(None, None, None)


def writes(calls: list[tuple[str, str, dict[str, str]]]) -> list[tuple[str, str]]:
    """(method, path) of every request that could change something without being a dry run."""
    return [
        (m, p) for m, p, q in calls if m in ("POST", "PUT", "PATCH", "DELETE") and "dryRun" not in q
    ]
