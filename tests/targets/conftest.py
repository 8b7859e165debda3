"""Fixtures for target tests (see testbed.py), and the kmock API server of the Kubernetes tests.

kmock answers API discovery (`/api`, `/apis`, `/apis/<group>/<version>`) from the resources
declared on it. `CLUSTER` declares what a Kubernetes 1.29 API server lists there (its
APIResourceList entries: name, kind, namespaced, verbs, shortNames, categories, and the
subresources such as `pods/log`, which pdctl must skip); custom resources are declared from the
real CRDs in tests/data/crds, as the API server does for an installed CRD. kmock keeps objects
per group version, so each group is declared in one version (a CRD's storage version).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

CRDS = Path(__file__).resolve().parents[1] / "data" / "crds"

ALL = "create delete deletecollection get list patch update watch"
NO_COLLECTION = "create delete get list patch update watch"
# [group/version], then per resource: plural Kind N(amespaced)|C(luster) verbs shortNames
# subresources categories (comment lines start with #)
CLUSTER = (Path(__file__).parent / "data" / "kube-1.29-resources.txt").read_text()
VERBS = {"ALL": ALL, "NO_COLLECTION": NO_COLLECTION}


def builtin_resources() -> dict[str, dict[str, Any]]:
    """'group/version/plural' -> kmock ResourceInfo fields, from CLUSTER."""
    out = {}
    gv = ""
    for line in CLUSTER.strip().splitlines():
        if line.startswith("#"):
            continue
        if line.startswith("["):
            gv = line.strip("[]")
            continue
        plural, kind, scope, verbs, short, subs, cats = line.split()
        out[f"{gv}/{plural}"] = {
            "kind": kind, "singular": kind.lower(), "namespaced": scope == "N",
            "verbs": VERBS.get(verbs, verbs.replace(",", " ")).split(),
            "shortnames": [] if short == "-" else short.split(","),
            "subresources": [] if subs == "-" else subs.split(","),
            "categories": [] if cats == "-" else cats.split(","),
        }
    return out


@functools.cache
def _crd(crd_file: Path) -> Any:
    """The CRD file parsed, once a session (1.7 MB of YAML: about a second each time)."""
    return yaml.safe_load(crd_file.read_text())


def crd_resources(crd_file: Path) -> dict[str, dict[str, Any]]:
    """What the API server lists for an installed CRD, in its storage version."""
    crd = _crd(crd_file)
    spec, names = crd["spec"], crd["spec"]["names"]
    version = next(v for v in spec["versions"] if v.get("storage"))
    return {
        f"{spec['group']}/{version['name']}/{names['plural']}": {
            "kind": names["kind"], "singular": names.get("singular", names["kind"].lower()),
            "namespaced": spec["scope"] == "Namespaced", "verbs": ALL.split(),
            "shortnames": [*names.get("shortNames", [])],
            "categories": [*names.get("categories", [])],
            "subresources": sorted(version.get("subresources") or {}),
        }
    }


def installed_crds() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        out.update(crd_resources(path))
    return out


@dataclass
class KubeServer:
    url: str
    emulator: Any  # kmock.KubernetesEmulator: .objects holds what was stored
    log: list[tuple[str, str]]  # (method, path) of every request, in order

    def paths(self, method: str = "GET") -> list[str]:
        return [path for m, path in self.log if m == method]


@contextmanager
def kube_server(resources: dict[str, dict[str, Any]]) -> Iterator[KubeServer]:
    """kmock serving `resources` (and their discovery) on a free port from a thread."""
    kmock = pytest.importorskip("kmock")
    log: list[tuple[str, str]] = []

    class Emulator(kmock.KubernetesEmulator):  # type: ignore[misc]
        """kmock matching each request against every earlier one makes a long session
        quadratic; this one logs requests itself and keeps only the current one."""

        async def _handle(self, request: Any) -> Any:
            log.append((request.method.value, request.url.path))
            try:
                return await super()._handle(request)
            finally:
                self._requests[:] = self._requests[-1:]

    found: dict = {}
    stop = threading.Event()
    ready = threading.Event()  # set once it serves, or once the thread ended (then it failed)

    def serve() -> None:
        async def main() -> None:
            async with Emulator() as km, kmock.Server(km, port=0) as srv:
                for key, info in resources.items():
                    km.resources[key] = kmock.ResourceInfo(**info)
                found["server"] = KubeServer(str(srv.url).rstrip("/"), km, log)
                ready.set()
                while not stop.is_set():
                    await asyncio.sleep(0.05)

        try:
            asyncio.run(main())
        finally:
            ready.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    # No fixed number of polls: a loaded machine may take longer than 10 s to start kmock.
    # 300 s only ends a hang.
    ready.wait(300)
    assert "server" in found, "kmock did not start (its error is in the thread's traceback)"
    try:
        yield found["server"]
    finally:
        stop.set()
        thread.join(5)


@pytest.fixture
def cluster() -> Iterator[KubeServer]:
    """A kmock cluster of this test's own (no object, rule or request log of another test
    reaches it) serving the built-in API of Kubernetes 1.29, the Gateway API HTTPRoute and the
    Gateway API Inference Extension InferencePool."""
    with kube_server({**builtin_resources(), **installed_crds()}) as srv:
        yield srv
