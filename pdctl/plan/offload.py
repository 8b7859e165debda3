"""`engine.kvOffload`: KV blocks offloaded to host memory, rendered for every engine, alone or
beside the P/D connector (MultiConnector), and the host memory it takes.

vLLM's native offloading (both pinned versions): `--kv-offloading-size GiB` with
`--kv-offloading-backend native` makes VllmConfig set kv_connector OffloadingConnector with
kv_connector_extra_config.cpu_bytes_to_use = size x 2**30 and kv_role kv_both
(vllm/config/vllm.py `_post_init_kv_transfer_config`: 0.23.0 l.757-800, 0.33.0 l.1151-1186).
That overwrites any kv_connector given in --kv-transfer-config, so beside a P/D connector pdctl
writes the OffloadingConnector document itself inside a MultiConnector. The size is the whole
engine's, all TP ranks together (vllm/config/cache.py `kv_offloading_size`, 0.23.0 l.168).

`--kv-offloading-backend lmcache` means LMCacheMPConnector, which needs a separate LMCache
server; pdctl's `lmcache` backend is LMCacheConnectorV1 instead (in-process, LMCache's local
CPU tier), configured by LMCACHE_* variables: LMCache reads them when no LMCACHE_CONFIG_FILE
is set (vllm/distributed/kv_transfer/kv_connector/v1/lmcache_integration/utils.py
`lmcache_get_or_create_config`), and each worker process (TP rank) builds its own engine and
CPU tier (vllm_v1_adapter.py `LMCacheConnectorV1Impl.__init__`: `_init_lmcache_engine` in
every non-scheduler role), so the size per worker is the engine's size / its workers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pdctl.compat import Release
from pdctl.errors import SpecError
from pdctl.plan.kv import check_kv_keys, kv_json
from pdctl.spec.model import Spec
from pdctl.spec.speculative import KvOffload

GIB = 1024**3
KV_FLAG = "--kv-transfer-config"
# Flags pdctl writes for engine.kvOffload: given in extraArgs too, one would silently win.
OFFLOAD_FLAGS = ("--kv-offloading-size", "--kv-offloading-backend", KV_FLAG)
LMCACHE_ENV = ("LMCACHE_LOCAL_CPU", "LMCACHE_MAX_LOCAL_CPU_SIZE", "LMCACHE_CONFIG_FILE")
# Neither backend runs on vLLM's CPU platform (docs/spec.md#kv-offloading): the native
# CPUOffloadingSpec refuses any platform but CUDA-alike and XPU when the worker registers its
# KV caches (vllm/v1/kv_offload/cpu/spec.py: 0.23.0 `get_handlers` l.110-114, 0.33.0
# `get_worker` l.220-224; the 0.32.0 CPU build fails its start with that line), and LMCache's
# connector puts its engine on `cuda:<rank>` (lmcache_integration/vllm_v1_adapter.py
# `_init_lmcache_engine`: 0.23.0 l.488, 0.33.0 l.491).
CPU_REFUSAL = {
    "native": "vLLM's native KV offloading needs CUDA or XPU engines: with engine.device cpu "
    "vLLM stops at start ('CPU Offloading is currently only supported on CUDA-alike and XPU "
    "GPUs')",
    "lmcache": "LMCache's connector needs CUDA engines (it places its cache on cuda:<rank>); "
    "engine.device cpu cannot run it",
}
CPU_FIX = "remove engine.kvOffload, or use engine.device cuda"


def number_text(value: float) -> str:
    """A number as a flag or variable takes it: at most 4 decimals, no trailing zeros (0.9, 40)."""
    return f"{value:.4f}".rstrip("0").rstrip(".")


def offload_connector(off: KvOffload) -> dict[str, Any]:
    """The offloading connector's own --kv-transfer-config document (MultiConnector part)."""
    if off.backend == "lmcache":
        return {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    return {
        "kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": int(off.size_gib * GIB)},
    }


def with_offload(cfg: dict[str, Any], off: KvOffload, release: Release) -> dict[str, Any]:
    """A P/D connector's document with the offloading connector beside it: one MultiConnector
    (the P/D connector first: MultiConnector loads from the first connector that has a
    request's tokens, vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py
    `get_num_new_matched_tokens`)."""
    release.require_connector("MultiConnector", path="engine.kvOffload")
    part = offload_connector(off)
    release.require_connector(part["kv_connector"], path="engine.kvOffload.backend")
    if cfg.get("kv_connector") == "MultiConnector":
        extra = dict(cfg.get("kv_connector_extra_config", {}))
        extra["connectors"] = [*extra.get("connectors", []), part]
        return {**cfg, "kv_connector_extra_config": extra}
    return {
        "kv_connector": "MultiConnector", "kv_role": cfg.get("kv_role", "kv_both"),
        "kv_connector_extra_config": {"connectors": [cfg, part]},
    }


def offload_args(
    spec: Spec, release: Release, extra: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The plan's (flag, value) pairs with engine.kvOffload applied: merged into the P/D
    connector's --kv-transfer-config where there is one, else vLLM's own flags (native) or an
    LMCacheConnectorV1 document (lmcache)."""
    off = spec.engine.kv_offload
    pairs = list(extra)
    if off is None:
        return pairs
    if spec.engine.device == "cpu":
        raise SpecError(CPU_REFUSAL[off.backend], path="engine.kvOffload", fix=CPU_FIX)
    for i, (flag, value) in enumerate(pairs):
        if flag == KV_FLAG:
            cfg = with_offload(json.loads(value), off, release)
            check_kv_keys(cfg, release)
            pairs[i] = (KV_FLAG, kv_json(cfg))
            return pairs
    if off.backend == "lmcache":
        part = offload_connector(off)
        release.require_connector(part["kv_connector"], path="engine.kvOffload.backend")
        return [*pairs, (KV_FLAG, kv_json(part))]
    for flag in OFFLOAD_FLAGS[:2]:
        if not release.has_flag(flag):
            raise SpecError(
                f"{flag} is not a `vllm serve` flag in vLLM {release.version}",
                path="engine.kvOffload",
                fix="pin an engine.version that has native KV offloading (0.23.0 or later)",
            )
    return [
        *pairs, ("--kv-offloading-size", number_text(off.size_gib)),
        ("--kv-offloading-backend", "native"),
    ]


def check_offload_flags(spec: Spec, args: tuple[str, ...], path: str) -> None:
    """extraArgs must not set what engine.kvOffload renders."""
    if spec.engine.kv_offload is None:
        return
    for i, arg in enumerate(args):
        name = arg.split("=", 1)[0].replace("_", "-")
        if name in OFFLOAD_FLAGS:
            raise SpecError(
                f"{name} is set by pdctl from engine.kvOffload", path=f"{path}[{i}]",
                fix="remove it; engine.kvOffload renders the offloading connector",
            )


def offload_env(spec: Spec, workers: int) -> dict[str, str]:
    """LMCache's local CPU tier for an engine of `workers` processes (TP x PP ranks)."""
    off = spec.engine.kv_offload
    if off is None or off.backend != "lmcache":
        return {}
    return {
        "LMCACHE_LOCAL_CPU": "True",
        "LMCACHE_MAX_LOCAL_CPU_SIZE": number_text(off.size_gib / max(1, workers)),
    }


def check_offload_env(spec: Spec) -> None:
    """engine.env (or a role's env) must not set the LMCache variables pdctl writes."""
    off = spec.engine.kv_offload
    if off is None or off.backend != "lmcache":
        return
    roles = [("engine.env", spec.engine.env)]
    roles += [
        (f"{n}.env", r.env)
        for n, r in (("prefill", spec.prefill), ("decode", spec.decode))
        if r is not None
    ]
    for where, env in roles:
        for key in env:
            if key in LMCACHE_ENV:
                raise SpecError(
                    f"{key} is set by pdctl from engine.kvOffload (backend lmcache)",
                    path=f"{where}.{key}",
                    fix="remove it; engine.kvOffload.sizeGib sizes LMCache's CPU tier",
                )
