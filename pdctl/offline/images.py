"""Container images in a bundle (`pdctl bundle --images`): each image the spec's docker hosts
run is saved from the local Docker engine (the docker library: `Image.save`, the engine's
`GET /images/{name}/get`, https://docs.docker.com/reference/api/engine/version/v1.43/#tag/Image/operation/ImageGet)
into DIR/images/<ref>.tar, pinned by sha256 like every file, with its image id. `up --bundle`
asks each docker host for the image id first (`docker image inspect`), and only where it
differs copies the tar and runs `docker load` over SSH."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pdctl.errors import PdctlError, UsageError
from pdctl.plan.model import Plan

IMAGES = "images"


@dataclass(frozen=True)
class Image:
    ref: str  # as the spec names it, e.g. vllm/vllm-openai:v0.23.0
    id: str  # sha256:... (the engine's image id)
    file: str  # images/<name>.tar


def refs(plan: Plan) -> tuple[str, ...]:
    """The images the plan's containers run."""
    return tuple(sorted({u.image for u in plan.units if u.image is not None}))


def hosts_refs(plan: Plan) -> dict[str, tuple[str, ...]]:
    """host name -> the images its containers run."""
    out: dict[str, set[str]] = {}
    for u in plan.units:
        if u.image is not None:
            out.setdefault(u.host.name, set()).add(u.image)
    return {h: tuple(sorted(r)) for h, r in out.items()}


def tar_name(ref: str) -> str:
    return f"{IMAGES}/{re.sub(r'[^A-Za-z0-9_.-]', '_', ref)}.tar"


def save(wanted: tuple[str, ...], folder: Path, old: dict[str, Image],
         say: Callable[[str], None]) -> tuple[Image, ...]:
    """Each image from the local Docker engine (DOCKER_HOST, else its default socket) into
    folder/images; a tar already there for the same image id (and vouched for by the old
    manifest: `old`) stays. Never pulls: an image the engine lacks is refused."""
    import docker
    from docker.errors import DockerException, ImageNotFound

    try:
        client = docker.from_env()
        client.ping()
    except DockerException as exc:
        raise PdctlError(f"--images: cannot reach the local Docker engine ({exc})") from None
    (folder / IMAGES).mkdir(parents=True, exist_ok=True)
    out = []
    try:
        for ref in wanted:
            try:
                image = client.images.get(ref)
            except ImageNotFound:
                raise UsageError(f"--images: {ref} is not in the local Docker engine",
                                 fix=f"docker pull {ref} where the internet is, then run "
                                 "pdctl bundle again") from None
            item = Image(ref, str(image.id), tar_name(ref))
            path = folder / item.file
            if old.get(ref) == item and path.is_file():
                say(f"{ref}: {item.id[:19]} already saved")
            else:
                tmp = path.with_name(f".{path.name}.tmp")
                with tmp.open("wb") as fh:
                    for chunk in image.save(named=True):
                        fh.write(chunk)
                os.replace(tmp, path)
                say(f"{ref}: saved {item.id[:19]} ({path.stat().st_size / 1e6:.1f} MB)")
            out.append(item)
    finally:
        client.close()
    return tuple(out)


def inspect_command(ref: str) -> str:
    """The host's image id of `ref` ('' when it has none)."""
    return f"docker image inspect --format '{{{{.Id}}}}' {shlex.quote(ref)} 2>/dev/null || true"


def load_command(tar: str, ref: str) -> str:
    return f"docker load -i {shlex.quote(tar)} && rm -f -- {shlex.quote(tar)} && " + \
        inspect_command(ref)
