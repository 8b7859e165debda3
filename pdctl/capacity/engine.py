"""vLLM version strings, and the GPU-name key the capacity tables match on."""

from __future__ import annotations

import re

PINNED = "0.33.0"
V1_FROM = (0, 8)  # the V1 engine is the default from vLLM 0.8


def version(text: str | None) -> tuple[int, int]:
    """(major, minor) of a vLLM version string; the pinned one when unknown."""
    return patch_version(text)[:2]


def is_v1(engine: str | None) -> bool:
    """The V1 engine (0.8 and later; logs that say `V0 LLM engine` use `engine: 0.7`)."""
    return version(engine) >= V1_FROM


def _key(gpu_name: str) -> str:
    return "".join(ch for ch in gpu_name.lower().replace("nvidia", "") if ch.isalnum())


def patch_version(text: str | None) -> tuple[int, int, int]:
    """(major, minor, patch) of a vLLM version string; the pinned one when unknown."""
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text or PINNED)
    if match is None:
        return patch_version(PINNED)
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
