"""LoRA adapters in a bundle (`pdctl bundle --adapters`): each `hf` adapter of the spec, pinned
by its revision, taken from the local Hugging Face cache (as `--weights`: files pinned by
sha256) into DIR/adapters/<folder>. `up --bundle` copies each to the engine hosts' adapter
folder, `~/.cache/pdctl-adapters/<folder>`, with the revision marker the start script checks
(templates/adapter-fetch.sh.j2), so nothing is fetched from the Hub (docs/offline.md)."""

from __future__ import annotations

from pathlib import Path

from pdctl.errors import SpecError, UsageError
from pdctl.offline import manifest as mf
from pdctl.plan.model import Plan
from pdctl.spec.lora import folder


def pinned(plan: Plan) -> dict[str, tuple[str, str]]:
    """folder -> (repository, revision) of every adapter the engines fetch from the Hub; a
    SpecError for one without a revision (the Hub's newest, which no bundle can pin)."""
    lora = plan.spec.model.lora
    out: dict[str, tuple[str, str]] = {}
    for i, a in enumerate(lora.adapters if lora is not None else ()):
        if a.hf is None:
            continue
        if a.revision is None:
            raise SpecError(
                f"adapter {a.name} ({a.hf}) has no revision: the engines would fetch the Hub's "
                "newest when they start, which a bundle cannot carry",
                path=f"model.lora.adapters[{i}].revision",
                fix="pin it: the commit in the adapter's snapshot folder name",
            )
        out[folder(a)] = (a.hf, a.revision)
    return out


def snapshot(cache: Path, repo: str, revision: str) -> Path:
    """The cache's snapshot folder of `repo` at `revision`: a commit (in full or its start) or
    a branch or tag the cache recorded in refs/ (the layout huggingface_hub writes:
    https://huggingface.co/docs/huggingface_hub/guides/manage-cache)."""
    base = cache / f"models--{repo.replace('/', '--')}"
    ref = base / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision
    names = sorted(p.name for p in (base / "snapshots").glob(f"{commit}*") if p.is_dir())
    if len(names) != 1 or (commit != revision and names[0] != commit):
        raise UsageError(
            f"--adapters: {repo} at {revision} is not in the Hugging Face cache {cache}"
            + (f" ({len(names)} snapshots start with it)" if len(names) > 1 else ""),
            fix=f"where the internet is: huggingface-cli download {repo} --revision {revision} "
            "(HF_HUB_CACHE or HF_HOME name another cache)",
        )
    return base / "snapshots" / names[0]


def from_cache(plan: Plan, cache: Path) -> dict[str, Path]:
    """Every pinned adapter's files, by their path below DIR/adapters."""
    from pdctl.offline.download import snapshot_files

    out: dict[str, Path] = {}
    for name, (repo, revision) in pinned(plan).items():
        found = snapshot(cache, repo, revision)
        for rel, path in snapshot_files(found, "--adapters", "adapter").items():
            out[f"{name}/{rel}"] = path
    return out


def covers(plan: Plan, manifest: mf.Manifest, folder_: Path) -> None:
    """BundleError when the bundle lacks an adapter the engines would fetch."""
    have = {p.split("/", 1)[0] for p in manifest.part(mf.ADAPTERS)}
    for name, (repo, revision) in pinned(plan).items():
        if name not in have:
            raise mf.BundleError(
                f"{folder_ / mf.MANIFEST}: the bundle does not carry the LoRA adapter {repo} at "
                f"{revision}, which the engines fetch from the Hub",
                fix="run `pdctl bundle --adapters` of this spec again",
            )

