"""Pull an engine's image onto a Docker host through the docker SDK, as `docker run` does when
the image is missing, and say how far the pull is.

The engine pulls with its own credentials and registry configuration; pdctl only asks
(`POST /images/create`, the SDK's low-level `api.pull` with a decoded stream) and reads the
stream: one event per layer step (`Pulling fs layer`, `Downloading` with progressDetail
current/total, `Download complete`, `Extracting`, `Pull complete`, `Already exists`), and an
`error` event when the registry refuses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pdctl.errors import PdctlError

# Layer steps of the pull stream; a layer is done after the last two.
LAYER_STEPS = frozenset(
    (
        "Pulling fs layer", "Waiting", "Downloading", "Verifying Checksum", "Download complete",
        "Extracting", "Pull complete", "Already exists",
    )
)
DONE_STEPS = frozenset(("Pull complete", "Already exists"))
EVERY = 2.0  # seconds between two progress reports while the layers download


def reference(image: str) -> tuple[str, str]:
    """(repository, tag or digest) of an image reference: `repo:tag`, `repo@sha256:...`
    (the engine takes a digest where the tag goes), `host:port/repo` (tag latest)."""
    if "@" in image:
        repo, digest = image.rsplit("@", 1)
        return repo, digest
    repo, _, tag = image.rpartition(":")
    if repo and "/" not in tag:
        return repo, tag
    return image, "latest"


def size(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


@dataclass
class PullProgress:
    """What the pull stream said so far, per layer."""

    image: str
    steps: dict[str, str] = field(default_factory=dict)  # layer id -> its latest step
    current: dict[str, int] = field(default_factory=dict)  # layer id -> bytes downloaded
    total: dict[str, int] = field(default_factory=dict)  # layer id -> its size

    def update(self, event: dict[str, Any]) -> None:
        step, layer = event.get("status", ""), event.get("id")
        if not layer or step not in LAYER_STEPS:
            return
        self.steps[layer] = step
        detail = event.get("progressDetail") or {}
        if step == "Downloading" and detail.get("total"):
            self.total[layer] = int(detail["total"])
            self.current[layer] = int(detail.get("current") or 0)
        elif step in ("Download complete", "Pull complete") and layer in self.total:
            self.current[layer] = self.total[layer]

    def line(self) -> str:
        """`pulling vllm/vllm-openai:v0.x: 12/30 layers, 3.1/9.8 GB`."""
        if not self.steps:
            return f"pulling {self.image}"
        done = sum(1 for s in self.steps.values() if s in DONE_STEPS)
        head = f"pulling {self.image}: {done}/{len(self.steps)} layers"
        if not self.total:
            return head
        got, whole = sum(self.current.values()), sum(self.total.values())
        unit = 1e9 if whole >= 1e9 else 1e6
        return f"{head}, {got / unit:.1f}/{size(whole)}"


def present(client: Any, image: str) -> bool:
    import docker

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return False
    except docker.errors.APIError as exc:
        raise PdctlError(
            f"image {image}: the Docker engine says {exc.explanation or exc}"
        ) from None
    return True


def pull(client: Any, image: str, what: str, report: Callable[[str], None]) -> None:
    """Pull `image`, calling `report` with the progress line now and then (at most every
    EVERY seconds, and at the end). A refusal raises one line: `what: cannot pull ...`."""
    import docker

    repo, tag = reference(image)
    progress = PullProgress(image)
    report(progress.line())
    shown = time.monotonic()
    try:
        for event in client.api.pull(repo, tag=tag, stream=True, decode=True):
            if event.get("error"):
                raise PdctlError(f"{what}: cannot pull image {image}: {event['error']}")
            progress.update(event)
            if time.monotonic() - shown >= EVERY:
                report(progress.line())
                shown = time.monotonic()
    except docker.errors.APIError as exc:
        why = exc.explanation or str(exc)
        raise PdctlError(f"{what}: cannot pull image {image}: {why}") from None
    report(progress.line())
