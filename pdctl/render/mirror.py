"""Image references of rendered Kubernetes objects (pure): every container's (`containers`,
`initContainers`, `ephemeralContainers`) and every image volume's, listed for `pdctl bundle`
and moved to a registry mirror with `kubernetes.imageMirror` (docs/offline.md)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def _slots(node: Any) -> Iterator[tuple[dict[str, Any], str]]:
    """(dict, key) of every image reference below `node`: a container's `image`, an image
    volume's `image.reference` (https://kubernetes.io/docs/concepts/storage/volumes/#image)."""
    if isinstance(node, list):
        for item in node:
            yield from _slots(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in CONTAINER_LISTS and isinstance(value, list):
                yield from ((c, "image") for c in value if isinstance(c.get("image"), str))
            elif key == "volumes" and isinstance(value, list):
                yield from ((v["image"], "reference") for v in value
                            if isinstance(v.get("image"), dict) and "reference" in v["image"])
            yield from _slots(value)


def images(objects: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> tuple[str, ...]:
    """Every image the objects' pods run or mount, sorted, once each."""
    return tuple(sorted({slot[key] for obj in objects for slot, key in _slots(obj)}))


def split(ref: str) -> tuple[str, str]:
    """(registry, the rest) as Docker reads a reference: the first part is a registry only when
    it holds '.' or ':' or is `localhost`; else Docker Hub's."""
    first, slash, rest = ref.partition("/")
    if slash and (any(c in first for c in ".:") or first == "localhost"):
        return first, rest
    return "docker.io", ref


def mirrored(ref: str, mirror: str) -> str:
    """`ref` pulled from `mirror` instead: its registry replaced, the path, tag and digest kept
    (ghcr.io/llm-d/x:v1 -> MIRROR/llm-d/x:v1, vllm/vllm-openai:v0.33.0 -> MIRROR/vllm/...)."""
    return f"{mirror}/{split(ref)[1]}"


def rewrite(objects: list[dict[str, Any]], change: Callable[[str], str]) -> list[dict[str, Any]]:
    """A copy of the objects with every image reference changed."""
    objects = copy.deepcopy(objects)
    for obj in objects:
        for slot, key in list(_slots(obj)):
            slot[key] = change(slot[key])
    return objects
