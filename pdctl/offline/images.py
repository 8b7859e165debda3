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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pdctl.errors import PdctlError, UsageError
from pdctl.plan.model import Plan

IMAGES = "images"


@dataclass(frozen=True)
class Image:
    ref: str  # as the spec names it, e.g. vllm/vllm-openai:v0.23.0
    id: str  # sha256:... (the engine's image id)
    file: str  # images/<name>.tar


def refs(plan: Plan) -> tuple[str, ...]:
    """The images the plan's containers run; for Kubernetes every image of the rendered
    objects, as the spec names them (before `kubernetes.imageMirror` moves them)."""
    if plan.on_kubernetes:
        from pdctl.render import render
        from pdctl.render.mirror import images

        k8s = plan.spec.kubernetes.model_copy(update={"image_mirror": None})
        upstream = replace(plan, spec=plan.spec.model_copy(update={"kubernetes": k8s}))
        return images(render(upstream).objects)
    return tuple(sorted({u.image for u in plan.units if u.image is not None}))


def tar_name(ref: str) -> str:
    return f"{IMAGES}/{re.sub(r'[^A-Za-z0-9_.-]', '_', ref)}.tar"


def engine() -> Any:
    """The docker library's client of the local Docker engine (DOCKER_HOST, else its socket)."""
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env()
        client.ping()
    except DockerException as exc:
        raise PdctlError(f"--images: cannot reach the local Docker engine ({exc})") from None
    return client


def save(wanted: tuple[str, ...], folder: Path, old: dict[str, Image],
         say: Callable[[str], None]) -> tuple[Image, ...]:
    """Each image from the local Docker engine (DOCKER_HOST, else its default socket) into
    folder/images; a tar already there for the same image id (and vouched for by the old
    manifest: `old`) stays. Never pulls: an image the engine lacks is refused."""
    from docker.errors import ImageNotFound

    client = engine()
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


def _repo(name: str) -> str:
    """A repository as Docker shows it in RepoDigests (Docker Hub's prefixes dropped)."""
    from pdctl.render.mirror import split

    registry, rest = split(name)
    rest = rest.split("@")[0]
    if ":" in rest:
        rest = rest.rsplit(":", 1)[0]
    if registry == "docker.io":
        return rest.removeprefix("library/")
    return f"{registry}/{rest}"


def pinned(wanted: tuple[str, ...], say: Callable[[str], None]) -> dict[str, str]:
    """ref -> its line in images.txt: ref@digest (a ref with a tag pinned by the registry
    digest the local Docker engine has for it: `docker image inspect`'s RepoDigests), else
    the ref and why it has none (said too)."""
    from docker.errors import ImageNotFound

    out = {r: r for r in wanted if "@" in r}
    try:
        client = engine()
    except PdctlError as exc:
        say(f"no digests: {str(exc).removeprefix('--images: ')}")
        return {r: out.get(r, f"{r}  # no digest: no local Docker engine") for r in wanted}
    try:
        for ref in (r for r in wanted if r not in out):
            try:
                found = client.images.get(ref).attrs.get("RepoDigests") or []
            except ImageNotFound:
                out[ref] = f"{ref}  # no digest: not in the local Docker engine"
                say(f"{ref}: not in the local Docker engine: no digest (docker pull it, then "
                    "bundle again)")
                continue
            digest = [d.split("@", 1)[1] for d in found if _repo(d) == _repo(ref)]
            if digest:
                out[ref] = f"{ref}@{digest[0]}"
            else:
                out[ref] = f"{ref}  # no digest: never pulled or pushed by the local engine"
                say(f"{ref}: the local Docker engine has no registry digest for it (built or "
                    "loaded here, never pulled or pushed): listed by tag")
    finally:
        client.close()
    return out


LIST, SCRIPT = f"{IMAGES}/images.txt", f"{IMAGES}/mirror.sh"


def write_mirror(folder: Path, digests: dict[str, str], saved: tuple[Image, ...],
                 mirror: str | None) -> None:
    """DIR/images/images.txt (each image, pinned by digest where known) and
    DIR/images/mirror.sh MIRROR: `docker load` of each saved tar, `docker tag`, `docker push`
    to the mirror (for `kubernetes.imageMirror`)."""
    from pdctl.render.mirror import split

    (folder / IMAGES).mkdir(parents=True, exist_ok=True)
    lines = ["# The images of the spec's Kubernetes objects, pinned by the registry digest the",
             "# local Docker engine had for them (RepoDigests); a line without one says why."]
    lines += list(digests.values())
    (folder / LIST).write_text("\n".join(lines) + "\n")
    tars = {i.ref: i for i in saved}
    usage = "usage: sh mirror.sh HOST[:PORT] (the registry of kubernetes.imageMirror)"
    unset = (f"mirror={shlex.quote(mirror)}" if mirror
             else f"{{ echo {shlex.quote(usage)} >&2; exit 2; }}")
    script = ["#!/bin/sh", "# Written by pdctl bundle: push the spec's images to a registry "
              "mirror (docs/offline.md).", f"# {usage}", "set -eu", "mirror=${1:-}",
              f'[ -n "$mirror" ] || {unset}']
    if tars:
        script.append('here=$(cd "$(dirname "$0")" && pwd)')
    for ref in digests:  # the pushed name keeps the tag; docker push writes its own digest
        target = f'"$mirror"/{shlex.quote(split(ref)[1].split("@")[0])}'
        source = ref
        if ref in tars:
            script.append(f'docker load -i "$here"/{shlex.quote(Path(tars[ref].file).name)}')
            source = tars[ref].id
        script += [f"docker tag {shlex.quote(source)} {target}", f"docker push {target}"]
    (folder / SCRIPT).write_text("\n".join(script) + "\n")
    (folder / SCRIPT).chmod(0o755)
