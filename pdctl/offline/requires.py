"""What a bundle's closure asks of each distribution: the environments' own requirements and
every wheel's `Requires-Dist` (its METADATA, https://packaging.python.org/en/latest/
specifications/core-metadata/#requires-dist-multiple-use), so that `--skip-installed` can leave
out a wheel whose distribution a host has in another version that meets all of them, as pip
keeps an installed distribution that meets the requirements ("only-if-needed", pip's default
upgrade strategy: https://pip.pypa.io/en/stable/development/architecture/upgrade-options/)."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from pdctl.offline.need import canon


def environment(python: str, platform: str) -> dict[str, str]:
    """PEP 508 marker values of the hosts a bundle is for (CPython on Linux)."""
    m = re.search(r"_(x86_64|aarch64|ppc64le|s390x)$", platform)
    return {"python_version": python, "python_full_version": f"{python}.0", "os_name": "posix",
            "sys_platform": "linux", "platform_system": "Linux", "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "platform_machine": m.group(1) if m else "x86_64", "extra": ""}


def applies(marker: Marker | None, env: dict[str, str]) -> bool:
    """Whether a requirement counts: no marker, one true on the hosts, or one that names an
    extra (which extras the closure asked for is not known here: counting it only keeps more)."""
    return marker is None or "extra" in str(marker) or marker.evaluate(env)


def requirements(wheels: Path, roots: Iterable[str], python: str,
                 platform: str) -> dict[str, list[SpecifierSet]] | None:
    """canon name -> the specifiers every requirement in the closure puts on it; None when a
    wheel's METADATA cannot be read (then no version but the wheel's own may stand for it)."""
    env = environment(python, platform)
    lines = list(roots)
    for path in sorted(wheels.glob("*.whl")):
        asked = requires_dist(path)
        if asked is None:
            return None
        lines += asked
    out: dict[str, list[SpecifierSet]] = {}
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            return None
        if applies(req.marker, env):
            out.setdefault(canon(req.name), []).append(req.specifier)
    return out


def requires_dist(path: Path) -> list[str] | None:
    """A wheel's `Requires-Dist` lines (its METADATA's header); None when it cannot be read."""
    try:
        with zipfile.ZipFile(path) as whl:
            meta = next(n for n in whl.namelist()
                        if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
            text = whl.read(meta).decode("utf-8", "replace")
    except (zipfile.BadZipFile, StopIteration, OSError):
        return None
    head = text.split("\n\n", 1)[0]
    return [ln[len("Requires-Dist:"):].strip() for ln in head.splitlines()
            if ln.startswith("Requires-Dist:")]


def unmet(wheels: Path, files: Iterable[str], python: str, platform: str) -> list[str]:
    """What the hosts' pip will ask of one closure (FILES, wheel names in WHEELS) that no wheel
    of it meets: each requirement whose marker holds on the hosts' Python, without its marker
    (`setuptools<81.0.0,>=77.0.3`). pip evaluates markers with the Python it runs on, not
    --python-version (https://github.com/pypa/pip/issues/11010, /6117): a closure resolved on
    Python 3.11 for hosts on 3.12 misses vLLM's `setuptools<81; python_version > "3.11"`.
    Requirements under an extra are left out (which extras pip took is not known here)."""
    env = environment(python, platform)
    paths = [wheels / f for f in sorted(set(files))]
    have: dict[str, list[str]] = {}
    for path in paths:
        name, version = path.name.split("-")[:2]
        have.setdefault(canon(name), []).append(version)
    out: set[str] = set()
    for path in paths:
        for line in requires_dist(path) or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if req.marker is not None and ("extra" in str(req.marker)
                                           or not req.marker.evaluate(env)):
                continue
            versions = have.get(canon(req.name), [])
            if not any(meets(v, [req.specifier]) for v in versions):
                extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
                out.add(f"{canon(req.name)}{extras}{req.specifier}")
    return sorted(out)


def meets(installed: str | None, wanted: list[SpecifierSet]) -> bool:
    """Whether an installed version meets every specifier (a pre-release only where it is
    what is installed: pip does not upgrade away from it if it meets them)."""
    if installed is None:
        return False
    try:
        version = Version(installed)
    except InvalidVersion:
        return False
    return all(spec.contains(version, prereleases=True) for spec in wanted)
