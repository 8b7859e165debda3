"""`pdctl bundle`: the wheels a spec's hosts install, downloaded for hosts with no package
index, with a manifest (docs/offline.md). `up --bundle DIR` installs from it."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import typer

from pdctl.cli.options import FACTS, PHASE, SPEC, TARGET, check_phase_target
from pdctl.cli.specfile import plan_from, with_overlays
from pdctl.errors import SpecError, UsageError


@with_overlays
def bundle(
    spec: str = SPEC,
    output: Path = typer.Option(
        ..., "--output", "-o", metavar="DIR",
        help="The bundle folder (created; a second run keeps the files whose sha256 the "
        "manifest vouches for and downloads the rest)."),
    python: str | None = typer.Option(
        None, "--python", metavar="3.X",
        help="The hosts' Python version (default: 3.11 when every environment is a conda "
        "env pdctl creates; else required)."),
    platform: str | None = typer.Option(
        None, "--platform", metavar="TAG",
        help="The hosts' wheel platform tag, e.g. manylinux_2_28_x86_64 (glibc 2.28+, "
        "x86_64)."),
    weights: Path | None = typer.Option(
        None, "--weights", metavar="PATH",
        help="A local Hugging Face model folder (config.json, *.safetensors, tokenizer "
        "files) copied into DIR/weights, pinned by sha256; `up --bundle` copies it to each "
        "engine host and starts the engines from it (docs/offline.md)."),
    images: bool = typer.Option(
        False, "--images",
        help="Save the images the spec's docker hosts run from the local Docker engine "
        "(never pulled) into DIR/images; `up --bundle` loads them on each host that lacks "
        "their image id. Kubernetes: the images of the rendered objects, for "
        "DIR/images/mirror.sh (docs/offline.md)."),
    lora: bool = typer.Option(
        False, "--adapters",
        help="Copy the spec's LoRA adapters (model.lora.adapters with `hf` and `revision`) "
        "from the local Hugging Face cache (HF_HUB_CACHE, else HF_HOME/hub, else "
        "~/.cache/huggingface/hub) into DIR/adapters; `up --bundle` puts them where the "
        "engines' start scripts look first (docs/offline.md)."),
    split: str | None = typer.Option(
        None, "--split", metavar="SIZE",
        help="Cut every file over SIZE (e.g. 4G: 4 000 000 000 bytes, under FAT32's limit; "
        "700M; 2Gi) into parts PATH.000, PATH.001, ...; `up --bundle` and `preflight "
        "--bundle` join them again in DIR before checking them (docs/offline.md)."),
    skip: bool = typer.Option(
        False, "--skip-installed",
        help="Leave out the wheels whose distribution every host that installs them has "
        "in its engines' environment, as the --facts recording lists it, in that version or "
        "one meeting every requirement of the closure (`up --bundle`'s pip finds them "
        "installed; docs/offline.md)."),
    phase: int | None = PHASE,
    target: str | None = TARGET,
    facts: Path | None = FACTS,
) -> None:
    """Download the vLLM wheel and its whole dependency closure (and the KV connector's
    and the router's) for the hosts' Python and platform into DIR/wheels, with
    DIR/manifest.json (sha256 and size of every file), written last. With --weights,
    the model's folder too; for Kubernetes, the image list pinned by digest and the
    script that pushes the images to a registry mirror. Run it where a
    package index is reachable; `pdctl up SPEC --bundle DIR` installs from it."""
    from pdctl.offline.download import bundle as download
    from pdctl.offline.need import needs, platform_for, python_for

    check_phase_target(phase, target)
    most = size_of(split)
    plan, source = plan_from(spec, phase, target, facts)
    from pdctl.offline.adapters import from_cache, pinned
    from pdctl.offline.images import refs

    try:
        hub = {} if plan.on_kubernetes else pinned(plan)
    except SpecError as exc:
        raise source.locate(exc) from None
    if hub and not lora:
        raise UsageError(f"pdctl bundle: the engines fetch the LoRA adapter "
                         f"{next(iter(hub.values()))[0]} from the Hub when they start",
                         fix="add --adapters (from the local Hugging Face cache)")
    if lora and not hub:
        raise UsageError("--adapters: the spec's engines fetch no LoRA adapter from the "
                         "Hub (model.lora.adapters with hf and revision)",
                         fix="leave out --adapters")
    found = needs(plan, weights=weights is not None, images=images, adapters=lora)
    have = installed(facts, plan, found) if skip else None
    files = from_cache(plan, hf_cache()) if lora else None
    if images and not refs(plan):
        raise UsageError("--images: the spec runs no containers (no runtime docker host)",
                         fix="leave out --images")
    if facts is not None and found and (python is None or platform is None):
        got = recorded(facts, plan)
        if got is not None:
            taken = [f"--python {got[0]}"] if python is None and got[0] else []
            taken += [f"--platform {got[1]}"] if platform is None else []
            python, platform = python or got[0] or None, platform or got[1]
            typer.echo(f"from the recording {facts}: {' '.join(taken)}", err=True)
    version = python_for(found, python)
    tag = platform_for(platform, found)
    made = download(plan, found, version, tag, output,
                    lambda line: typer.echo(line, err=True), weights,
                    refs(plan) if images else (), files, most, have, str(facts or ""))
    what = f"Python {version}, {tag}" if found else "no wheels"
    if plan.on_kubernetes:
        what = f"images listed: {len(refs(plan))}"
    if made.weights:
        what += f"; weights: {len(made.part('weights'))} files"
    if made.part("adapters"):
        what += f"; LoRA adapters: {len(hub)}"
    cut = [e for e in made.files if e.parts]
    if cut:
        what += f"; {len(cut)} files split into {sum(e.parts for e in cut)} parts"
    if made.images:
        what += f"; images: {', '.join(r for r, _, _ in made.images)}"
    if skip:
        what += (f"; {len(made.skipped)} wheels left out, "
                 f"{sum(k.size for k in made.skipped) / 1e6:.1f} MB: the hosts have them")
    then = (f"push the images to a registry mirror with `sh {output}/images/mirror.sh "
            f"HOST[:PORT]` and set kubernetes.imageMirror" if plan.on_kubernetes
            else f"install with `pdctl up {spec} --bundle {output}`")
    typer.echo(f"{output}: {len(made.files)} files, {made.total() / 1e6:.1f} MB "
               f"({what}); {then}")


def hf_cache() -> Path:
    """The local Hugging Face cache, as huggingface_hub finds it (HF_HUB_CACHE, else
    HF_HOME/hub, else ~/.cache/huggingface/hub: https://huggingface.co/docs/huggingface_hub/
    package_reference/environment_variables#hfhubcache)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or "~/.cache/huggingface"
    return Path(home).expanduser() / "hub"


def size_of(text: str | None) -> int:
    """--split's SIZE in bytes: a number with K, M, G, T (powers of 1000) or Ki, Mi, Gi, Ti
    (powers of 1024), a B after either allowed; 0 for none."""
    if text is None:
        return 0
    m = re.fullmatch(r"(\d+)\s*([KMGT]i?)?B?", text.strip(), re.IGNORECASE)
    if not m or int(m.group(1)) == 0:
        raise UsageError(f"--split: expected a size like 4G, 700M or 2Gi (got {text!r})")
    unit = (m.group(2) or "").upper()
    power = " KMGT".index(unit[0]) if unit else 0
    return int(m.group(1)) * (1024 if unit.endswith("I") else 1000) ** power


def recorded(facts: Path, plan: Any) -> tuple[str, str] | None:
    """(Python version, wheel platform tag) of the hosts that install, from the bundle.txt of a
    preflight recording (`pdctl preflight SPEC --record DIR`): the one Python of the venv hosts
    ('' when every one is conda), the tag for the oldest glibc; None when the recording has no
    bundle.txt for them. UsageError when the hosts differ (one bundle is for one Python)."""
    from pdctl.plan.units import process_hosts
    from pdctl.preflight.bundle import FILE, parse
    from pdctl.preflight.record import read

    raw = read(facts, tuple(h.name for h in plan.spec.hosts))
    hosts = [h for h in process_hosts(plan) if FILE in raw.get(h.name, {})]
    if not hosts:
        return None
    try:
        seen = {h.name: parse(raw[h.name][FILE]) for h in hosts}
    except ValueError as exc:
        raise UsageError(f"--facts {facts}: a {FILE} is not one ({exc})",
                         fix="record the hosts again with `pdctl preflight SPEC --record DIR`"
                         ) from None
    conda = {h.name for h in hosts if h.runtime == "conda"}  # their env's Python is pdctl's
    pythons = {n: x.python for n, x in seen.items() if n not in conda}
    machines = {n: x.machine for n, x in seen.items()}
    for what, values in (("Python", pythons), ("machine", machines)):
        if len(set(values.values())) > 1:
            listed = ", ".join(f"{n}: {v or '?'}" for n, v in sorted(values.items()))
            raise UsageError(f"--facts {facts}: the hosts have different {what}s ({listed}); "
                             "one bundle is for one", fix="bundle a spec of each kind of host")
    glibc = [x.glibc for x in seen.values() if x.glibc is not None]
    if len(glibc) < len(seen):
        return None  # musl or unknown: the tag is for the user to give
    low = min(glibc)
    return (next(iter(pythons.values()), ""),
            f"manylinux_{low[0]}_{low[1]}_{next(iter(machines.values()))}")


def installed(facts: Path | None, plan: Any, found: Any) -> dict[str, tuple[str, dict[str, str]]]:
    """--skip-installed: host -> (the engines' environment, {name: version} installed there),
    from each recorded bundle.txt of the hosts that install. UsageError without --facts, or
    when a host's recording has no package list (an older pdctl's)."""
    from pdctl.offline.need import canon
    from pdctl.preflight.bundle import FILE, parse
    from pdctl.preflight.record import read

    if facts is None:
        raise UsageError("--skip-installed: what the hosts have comes from a recording",
                         fix="add --facts DIR (made by `pdctl preflight SPEC --record DIR`)")
    raw = read(facts, tuple(h.name for h in plan.spec.hosts))
    out = {}
    for host in sorted({h for n in found for h in n.hosts}):
        try:
            seen = parse(raw[host][FILE]) if FILE in raw.get(host, {}) else None
        except ValueError:
            seen = None
        if seen is None or seen.dists is None:
            raise UsageError(f"--skip-installed: the recording {facts} lists no packages of "
                             f"host {host} (no {host}/{FILE}, or one an older pdctl wrote)",
                             fix="record the hosts again with `pdctl preflight SPEC --record "
                             f"{facts}`")
        out[host] = (seen.env, {canon(n): v for n, v in seen.dists})
    return out
