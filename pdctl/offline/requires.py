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
        try:
            with zipfile.ZipFile(path) as whl:
                meta = next(n for n in whl.namelist()
                            if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
                text = whl.read(meta).decode("utf-8", "replace")
        except (zipfile.BadZipFile, StopIteration, OSError):
            return None
        head = text.split("\n\n", 1)[0]
        lines += [ln[len("Requires-Dist:"):].strip() for ln in head.splitlines()
                  if ln.startswith("Requires-Dist:")]
    out: dict[str, list[SpecifierSet]] = {}
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            return None
        if applies(req.marker, env):
            out.setdefault(canon(req.name), []).append(req.specifier)
    return out


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
