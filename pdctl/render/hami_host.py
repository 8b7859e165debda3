"""Phase 3 on hosts: the shell a sliced decode engine's start.sh runs before it starts, read from
the unit's planned environment (pdctl.plan.hami_host decides the values)."""

from __future__ import annotations

from pdctl.plan.hami_host import LOCK_DIR
from pdctl.plan.model import Unit
from pdctl.render.template import quote, quote_path


def slice_setup(unit: Unit) -> str:
    """'' for an engine without HAMi-core; else: stop with one line when the library is not
    readable (a preload that fails to load is only a loader warning, and the engine would run
    without any cap), create HAMi-core's lock folder, drop the slice's stale shared cache (it
    keeps the limits of the run that made it: HAMi-core's README)."""
    env = dict(unit.env)
    library = env.get("LD_PRELOAD")
    cache = env.get("CUDA_DEVICE_MEMORY_SHARED_CACHE")
    if library is None or cache is None:
        return ""
    lib = quote(library)
    why = quote(
        f"pdctl: HAMi-core library {library} is missing or unreadable on this host; install "
        "libvgpu.so there (HAMi-core's build.sh) or fix decode.share.library"
    )
    return "\n".join(
        [
            f"# HAMi-core slice: {env.get('CUDA_DEVICE_MEMORY_LIMIT', '')} of GPU "
            f"{env.get('CUDA_VISIBLE_DEVICES') or ','.join(map(str, unit.gpus)) or '?'}, "
            "preloaded from decode.share.library.",
            f"if [ ! -r {lib} ]; then", f"  echo {why} >&2", "  exit 1", "fi",
            f"mkdir -p {quote(LOCK_DIR)}", f"rm -f {quote_path(cache)}", "",
        ]
    )
