"""Loaded by the e2e engines (PYTHONPATH, tests/e2e/common.py's UCX environment): NIXL's
Python layer creates every agent with `pthrDelay = 0` (nixl 1.5.1 `_api.py`, `nixl_agent`),
and its UCX progress thread then calls poll() with a 0 ms timeout in a loop
(https://github.com/ai-dynamo/nixl/pull/347 made the delay that timeout): each idle NIXL engine
spins a whole core. Measured here: an idle agent used 100% of a core over 5 s, and 1% with the
delay raised to 10 ms. On the 2-core CI machine two spinning P/D engines starved everything else.

This raises the delay to PDCTL_NIXL_PTHR_DELAY_US (10 ms): UCX events still wake the thread at
once; only the periodic progress the timeout exists for comes at most 10 ms later. Test-only:
nothing pdctl renders for users does this."""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

DELAY_US = int(os.environ.get("PDCTL_NIXL_PTHR_DELAY_US", "10000"))


class _Bindings:
    """NIXL's bindings module, with nixlAgent given a config whose delay is at least DELAY_US."""

    def __init__(self, real: object) -> None:
        self._real = real

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)

    def nixlAgent(self, name: str, config: object) -> object:  # noqa: N802 - the binding's name
        config.pthrDelay = max(config.pthrDelay, DELAY_US)  # type: ignore[attr-defined]
        return self._real.nixlAgent(name, config)  # type: ignore[attr-defined]


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps `nixlBind` of nixl's `_api` module (nixl._api, nixl_cu12._api) once it is loaded."""

    def find_spec(self, fullname, path, target=None):  # noqa: ANN001, ANN201
        if not (fullname.startswith("nixl") and fullname.endswith("._api")):
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module) -> None:  # noqa: ANN001
            load(module)
            if hasattr(module, "nixlBind"):
                module.nixlBind = _Bindings(module.nixlBind)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _Finder())
