"""`preflight --bundle DIR`: will each host take what `pdctl bundle` made for it, with no
package index? The Python its environments install into (the bundle resolved one version),
its C library and machine against the bundle's wheel platform tag, and free space in its
dataDir for the wheels and the environments they unpack into (docs/offline.md).

The commands run on every venv and conda host (one short file, bundle.txt); the findings come
only with --bundle, from the manifest's Python, platform and size (`Wanted`). bundle.txt also
lists the distributions installed in the engines' environment, for `pdctl bundle --facts DIR
--skip-installed`.

On docker hosts (bundle-docker.txt): whether the SSH user reaches the Docker engine (`docker
load` runs as that user), the images it already has (by id), and free space for the image tars
`up --bundle` copies into dataDir (one at a time, removed once loaded) and for the images loaded
into the engine's root folder (`docker info`'s DockerRootDir): about each tar's size, since
`docker save` writes the layers uncompressed."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from pdctl.plan.model import Plan
from pdctl.plan.units import container_images, engine_hosts, process_hosts
from pdctl.preflight.facts import SSH
from pdctl.preflight.finding import Finding, gib
from pdctl.preflight.group import FIND_CONDA, conda_env
from pdctl.preflight.host import nearest
from pdctl.render.bundle import Bundle
from pdctl.render.host import bundle_dir
from pdctl.render.template import quote, quote_path
from pdctl.spec.lora import FETCHED
from pdctl.spec.model import Host, Spec

FILE = "bundle.txt"
DOCKER_FILE = "bundle-docker.txt"
IMAGES = 5000  # at most this many `image ID` lines
# The wheels are unpacked into the environments: an installed closure takes about twice its
# wheels, and the wheels themselves stay in <dataDir>/.pdctl-bundles/<name>/wheels.
ROOM = 3
# Legacy manylinux tags and the glibc they mean (PEP 600:
# https://peps.python.org/pep-0600/#legacy-manylinux-tags).
LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
# The environment's distributions, one `dist NAME VERSION` line each (importlib.metadata: no pip
# needed; -I: not the working folder's, not the user's site-packages), at most DISTS lines.
LIST = ('import importlib.metadata as m; [print("dist", d.metadata["Name"], d.version) '
        'for d in m.distributions() if d.metadata["Name"]]')
DISTS = 5000
HELD = 50000  # at most this many `held` lines (a model of many small files counts in part)


@dataclass(frozen=True)
class Wanted:
    """What a bundle asks of a host (from its manifest)."""

    python: str  # "3.11"
    platform: str  # "manylinux_2_28_x86_64"
    size: int  # bytes of the wheels that go to each host
    folder: str  # the bundle folder, for the fix lines
    weights: int = 0  # bytes of the model's files (`pdctl bundle --weights`), copied as they are
    images: tuple[tuple[str, str, int], ...] = ()  # (ref, image id, bytes of its tar)
    files: tuple[tuple[str, int], ...] = ()  # (manifest path, bytes): the wheels and weights
    adapters: int = 0  # bytes of the LoRA adapters' files (to ~/.cache/pdctl-adapters)


@dataclass(frozen=True)
class Seen:
    """What bundle.txt tells of one host."""

    python: str  # "3.11", "" when there is no python3
    python_from: str  # which interpreter answered (the venv's, or python3)
    glibc: tuple[int, int] | None  # None: not glibc (musl) or unknown
    machine: str  # uname -m
    free_kib: int | None
    mount: str
    env: str = ""  # the environment the distributions were listed in ("": none there yet)
    dists: tuple[tuple[str, str], ...] | None = None  # (name, version); None: not recorded
    # what an earlier `up --bundle` left in the bundle folder (down keeps it): path -> bytes
    held: tuple[tuple[str, int], ...] = ()
    adapters_free_kib: int | None = None  # where ~/.cache/pdctl-adapters is or will be
    adapters_mount: str = ""


@dataclass(frozen=True)
class DockerSeen:
    """What bundle-docker.txt tells of one docker host."""

    free_kib: int | None  # where dataDir is or will be
    mount: str
    engine: str  # the Docker root folder; "" when the engine did not answer
    why: str  # the engine's last error line, when it did not answer
    root_free_kib: int | None
    root_mount: str
    images: frozenset[str]  # the ids of the images it has
    remote: bool = False  # DOCKER_HOST names another machine: its root folder is not here


def free_lines(path: str, prefix: str = "") -> str:
    """`<prefix>free KIB` and `<prefix>mount DIR` of the filesystem that holds `path` (its
    nearest existing parent: a folder the start script makes later)."""
    return (nearest(path) + 'df -Pk "$p" | '
            f'awk \'NR==2 {{print "{prefix}free " $4; print "{prefix}mount " $6}}\'; ')


def docker_commands(host: Host) -> dict[str, str]:
    """Free space in dataDir; the engine's root folder (`root DIR`), or Docker's last error line
    (`noengine ...`: warnings on stderr are not mixed in); its free space where the engine is
    this machine's (a unix socket), else `remote`; the ids of its images."""
    info = "docker info --format '{{.DockerRootDir}}'"
    return {DOCKER_FILE: (
        free_lines(quote_path(host.data_dir))
        + f'if r=$({info} 2>/dev/null); then echo "root $r"; '
        f'else echo "noengine $({info} 2>&1 >/dev/null | tail -n 1)"; r=; fi; '
        'case "${DOCKER_HOST:-unix://}" in unix://*) '
        'case "$r" in /*) if [ -d "$r" ]; then ' + free_lines('"$r"', "root").rstrip("; ")
        + "; fi;; esac;; *) echo remote;; esac; "
        f"docker images -q --no-trunc 2>/dev/null | sort -u | head -n {IMAGES} | "
        "sed 's/^/image /'")}


def kib(value: str) -> int | None:
    """A `free`-style line's number of KiB, None when it is not one (df failed)."""
    return int(value.strip()) if value.strip().isdigit() else None


def parse_docker(text: str) -> DockerSeen:
    """bundle-docker.txt's lines; ValueError for a text that is not one."""
    got = dict(ln.partition(" ")[::2] for ln in text.splitlines() if ln.strip())
    if "root" not in got and "noengine" not in got:
        raise ValueError("no root or noengine line")
    return DockerSeen(
        free_kib=kib(got.get("free", "")), mount=got.get("mount", "").strip(),
        engine=got.get("root", "").strip(), why=got.get("noengine", "").strip(),
        root_free_kib=kib(got.get("rootfree", "")), root_mount=got.get("rootmount", "").strip(),
        images=frozenset(ln.split()[1] for ln in text.splitlines()
                         if ln.startswith("image ") and len(ln.split()) == 2),
        remote="remote" in got)


def commands(spec: Spec, host: Host) -> dict[str, str]:
    """One file of `key value` lines: the Python of the host's venv (python3 where the venv
    does not exist yet: the start script makes it from python3), glibc, machine, free space
    where dataDir is or will be; then the distributions of the engines' environment (`dist`
    lines, none where it does not exist yet) and `dists listed`."""
    if host.runtime == "docker":
        return docker_commands(host)
    venv = "''"
    if host.runtime == "venv":  # render/host.engine_setup's venv
        venv = quote_path(host.venv or f"~/.pdctl/venv/vllm-{spec.engine.version}")
    data = quote_path(host.data_dir)
    listing = f"-I -c {quote(LIST)} 2>/dev/null | head -n {DISTS}"
    if host.runtime == "conda":  # as preflight/group.py finds conda
        env = conda_env(host, spec)
        dists = (f'{FIND_CONDA}; if [ -x "$c" ]; then '
                 f'echo "env "{env}; "$c" run -n {env} python {listing}; fi; ')
    else:
        dists = f'if [ -x "$v/bin/python" ]; then echo "env $v"; "$v/bin/python" {listing}; fi; '
    return {FILE: (
        f'v={venv}; if [ -n "$v" ] && [ -x "$v/bin/python" ]; then py="$v/bin/python"; '
        'else py=python3; fi; echo "from $py"; '
        'echo "python $("$py" -c \'import sys; print("%d.%d" % sys.version_info[:2])\' '
        '2>/dev/null)"; '
        'echo "glibc $(getconf GNU_LIBC_VERSION 2>/dev/null)"; echo "machine $(uname -m)"; '
        + free_lines(data) + free_lines(quote_path(FETCHED), "ad") + held_line(spec.name, host)
        + dists + 'echo "dists listed"')}


def held_line(name: str, host: Host) -> str:
    """`held BYTES PATH` per file the bundle folder of deployment `name` holds (an earlier `up
    --bundle` copied it there and `down` keeps it; PATH as the manifest names it), at most
    HELD lines; none where find has no -printf (then nothing counts as there)."""
    there = quote_path(bundle_dir(name, host))
    return (f"if [ -d {there} ]; then find {there} -type f -printf 'held %s %P\\n' "
            f"2>/dev/null | head -n {HELD}; fi; ")


def parse(text: str) -> Seen:
    """bundle.txt's lines; ValueError for a text that is not one."""
    got = dict(ln.partition(" ")[::2] for ln in text.splitlines() if ln.strip())
    dists = tuple((d[1], d[2]) for d in (ln.split() for ln in text.splitlines())
                  if len(d) == 3 and d[0] == "dist")
    if "machine" not in got or "python" not in got:
        raise ValueError("no python or machine line")
    m = re.search(r"glibc\s+(\d+)\.(\d+)", got.get("glibc", ""))
    held = tuple((f[2], int(f[1])) for f in (ln.split(" ", 2) for ln in text.splitlines())
                 if len(f) == 3 and f[0] == "held" and f[1].isdigit())
    return Seen(
        python=got["python"].strip(), python_from=got.get("from", "python3").strip(),
        glibc=(int(m.group(1)), int(m.group(2))) if m else None, machine=got["machine"].strip(),
        free_kib=kib(got.get("free", "")), mount=got.get("mount", "").strip(),
        env=got.get("env", "").strip(), dists=dists if "dists" in got else None,
        held=held, adapters_free_kib=kib(got.get("adfree", "")),
        adapters_mount=got.get("admount", "").strip())


PARSERS = {FILE: parse, DOCKER_FILE: parse_docker}


def tag_needs(tag: str) -> tuple[tuple[int, int] | None, str] | None:
    """(the glibc a wheel platform tag needs, None for none; its machine), or None for a tag
    no Linux host takes."""
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", tag)
    if m:
        return (int(m.group(1)), int(m.group(2))), m.group(3)
    legacy, _, machine = tag.partition("_")
    if legacy in LEGACY and machine:
        return LEGACY[legacy], machine
    if tag.startswith("linux_"):
        return None, tag.removeprefix("linux_")
    return None


def host_findings(host: Host, index: int, raw: dict[str, str], want: Wanted) -> list[Finding]:
    """bundle.python, bundle.platform and bundle.disk for one reached host."""
    where = host.name
    if FILE not in raw:
        why = raw.get(FILE + ".err", "not gathered").strip().splitlines()
        return [Finding("WARN", "bundle.host", where, f"{FILE}: {why[-1] if why else '?'}",
                        "the host's Python, glibc and free space",
                        "check the host (sh, python3, getconf, df) and run preflight again")]
    seen = parse(raw[FILE])
    if not want.python:  # a bundle of weights only: nothing installs
        return [_disk(host, index, seen, want)]
    return [_python(host, index, seen, want), _platform(where, seen, want),
            _disk(host, index, seen, want)]


def _python(host: Host, index: int, seen: Seen, want: Wanted) -> Finding:
    expected = f"Python {want.python} (the bundle's)"
    if host.runtime == "conda":  # the env pdctl creates has CONDA_PYTHON; an existing one its own
        return Finding("PASS" if want.python == "3.11" else "FAIL", "bundle.python", host.name,
                       "conda env (Python 3.11 when pdctl creates it; offline it must exist)",
                       expected, "" if want.python == "3.11" else
                       f"bundle again with --python 3.11 (pdctl bundle SPEC -o {want.folder})")
    if not seen.python:
        return Finding("FAIL", "bundle.python", host.name, f"no Python ({seen.python_from})",
                       expected, f"install python{want.python} on the host, or set "
                       f"hosts[{index}].venv to a venv with it")
    found = f"Python {seen.python} ({seen.python_from})"
    if seen.python != want.python:
        return Finding("FAIL", "bundle.python", host.name, found, expected,
                       f"bundle again for this host: pdctl bundle SPEC -o {want.folder} "
                       f"--python {seen.python} --platform {want.platform}")
    return Finding("PASS", "bundle.python", host.name, found, expected)


def _platform(where: str, seen: Seen, want: Wanted) -> Finding:
    needs = tag_needs(want.platform)
    libc = "glibc ?" if seen.glibc is None else f"glibc {seen.glibc[0]}.{seen.glibc[1]}"
    found = f"{libc}, {seen.machine}"
    if needs is None:
        return Finding("FAIL", "bundle.platform", where, found,
                       f"{want.platform}: not a Linux wheel platform tag",
                       f"bundle again with --platform manylinux_2_28_{seen.machine}")
    glibc, machine = needs
    expected = (f"{machine}" if glibc is None
                else f"glibc {glibc[0]}.{glibc[1]} or newer, {machine} ({want.platform})")
    fix = ""
    if machine != seen.machine:
        fix = "bundle again with the hosts' machine in --platform"
    elif glibc is not None and (seen.glibc is None or seen.glibc < glibc):
        fix = ("bundle again with an older --platform the host's glibc takes, e.g. "
               f"manylinux_{seen.glibc[0]}_{seen.glibc[1]}_{machine}" if seen.glibc
               else "this host has no glibc (musl?): manylinux wheels do not install there")
    if fix:
        return Finding("FAIL", "bundle.platform", where, found, expected, fix)
    return Finding("PASS", "bundle.platform", where, found, expected)


def _disk(host: Host, index: int, seen: Seen, want: Wanted) -> Finding:
    # A file an earlier `up --bundle` left there with the manifest's path and size is kept (up
    # checks its sha256): it needs no room. One that differs is sent beside the old one first.
    held = dict(seen.held)
    there = sum(size for path, size in want.files if held.get(path) == size)
    need = max(0, want.size * ROOM + want.weights - there)
    # The LoRA adapters go to the home folder (~/.cache/pdctl-adapters): on dataDir's
    # filesystem they add to its need, elsewhere they need their own room.
    apart = bool(want.adapters) and seen.adapters_mount not in ("", seen.mount)
    if want.adapters and not apart:
        need += want.adapters
    expected = (f">= {gib(need, 'B')} free ({gib(want.size, 'B')} of wheels, unpacked into "
                f"the environments" + (f"; {gib(want.weights, 'B')} of weights" if want.weights
                                       else "")
                + (f"; {gib(want.adapters, 'B')} of LoRA adapters" if want.adapters and not apart
                   else "")
                + (f"; less {gib(there, 'B')} already there" if there else "") + ")"
                + (f", and >= {gib(want.adapters, 'B')} on {seen.adapters_mount} for the LoRA "
                   "adapters (~/.cache/pdctl-adapters)" if apart else ""))
    if seen.free_kib is None or (want.adapters and seen.adapters_free_kib is None):
        return Finding("WARN", "bundle.disk", host.name, "free space unknown (df)", expected,
                       f"check df on hosts[{index}].dataDir and in the home folder")
    found = f"{gib(seen.free_kib * 1024, 'B')} free on {seen.mount}"
    if apart and seen.adapters_free_kib is not None:
        found += f", {gib(seen.adapters_free_kib * 1024, 'B')} on {seen.adapters_mount}"
        if seen.adapters_free_kib * 1024 < want.adapters:
            return Finding("FAIL", "bundle.disk", host.name, found, expected,
                           f"free space on {seen.adapters_mount} (the SSH user's home)")
    if seen.free_kib * 1024 < need:
        return Finding("FAIL", "bundle.disk", host.name, found, expected,
                       f"free space there, or point hosts[{index}].dataDir at a larger disk")
    return Finding("PASS", "bundle.disk", host.name, found, expected)


def docker_findings(host: Host, index: int, raw: dict[str, str], refs: tuple[str, ...],
                    want: Wanted) -> list[Finding]:
    """bundle.docker and bundle.disk for one reached docker host that runs `refs`."""
    where = host.name
    try:
        seen = parse_docker(raw[DOCKER_FILE])
    except (KeyError, ValueError):
        why = raw.get(DOCKER_FILE + ".err", "not gathered").strip().splitlines()
        return [Finding("WARN", "bundle.host", where,
                        f"{DOCKER_FILE}: {why[-1] if why else 'unreadable'}",
                        "the host's Docker engine, its images and free space",
                        "check the host (sh, docker, df) and run preflight again")]
    mine = [(r, i, n) for r, i, n in want.images if r in refs]
    missing = [(r, n) for r, i, n in mine if i not in seen.images]
    expected = "the SSH user reaches the Docker engine (`up --bundle` runs docker load)"
    if not seen.engine:
        return [Finding("FAIL", "bundle.docker", where, f"no engine: {seen.why or '?'}",
                        expected, f"let hosts[{index}].user run docker (the docker group), "
                        "or start the Docker engine there")]
    had = len(mine) - len(missing)
    out = [Finding("PASS", "bundle.docker", where,
                   f"engine root {seen.engine}; {had} of {len(mine)} bundled images already "
                   "there", expected)]
    return out + [_docker_disk(index, where, seen, [n for _, n in missing])]


def _docker_disk(index: int, where: str, seen: DockerSeen, sizes: list[int]) -> Finding:
    tar, loaded = max(sizes, default=0), sum(sizes)
    expected = (f">= {gib(tar, 'B')} free in dataDir (the largest tar, copied one at a time) "
                f"and >= {gib(loaded, 'B')} where the engine keeps its images "
                f"({len(sizes)} to load)")
    if not sizes:
        return Finding("PASS", "bundle.disk", where, "every bundled image already there",
                       expected)
    if seen.remote:
        return Finding("WARN", "bundle.disk", where,
                       "the engine is another machine's (DOCKER_HOST): its room is not measured "
                       "here", expected, "check df on the engine's Docker root folder there")
    if seen.free_kib is None or seen.root_free_kib is None:
        return Finding("WARN", "bundle.disk", where, "free space unknown (df)", expected,
                       f"check df on hosts[{index}].dataDir and on the Docker root folder")
    found = (f"{gib(seen.free_kib * 1024, 'B')} free on {seen.mount}, "
             f"{gib(seen.root_free_kib * 1024, 'B')} on {seen.root_mount}")
    if seen.mount == seen.root_mount:  # one filesystem holds the tar and what it unpacks to
        short = seen.free_kib * 1024 < tar + loaded
        expected += f", together {gib(tar + loaded, 'B')} on {seen.mount}"
    else:
        short = seen.free_kib * 1024 < tar or seen.root_free_kib * 1024 < loaded
    if short:
        return Finding("FAIL", "bundle.disk", where, found, expected,
                       f"free space there, or point hosts[{index}].dataDir at a larger disk")
    return Finding("PASS", "bundle.disk", where, found, expected)


def no_index(where: str, pip_lines: list[str]) -> Finding:
    """The start scripts rendered for the bundle install with --no-index only."""
    networked = [ln.strip() for ln in pip_lines if "--no-index" not in ln]
    expected = "every pip install with --no-index --find-links (no package index)"
    if networked:
        return Finding("FAIL", "bundle.index", where, f"needs an index: {networked[0][:120]}",
                       expected, "report this: a script rendered for a bundle reaches an index")
    return Finding("PASS", "bundle.index", where,
                   f"{len(pip_lines)} pip installs, all from the bundle", expected)


def findings(plan: Plan, raw: dict[str, dict[str, str]], want: Wanted,
             rendered: Bundle) -> tuple[Finding, ...]:
    """bundle.* findings: each reached host that installs from the bundle, each reached docker
    host that loads its images, then the scripts rendered from the bundle."""
    out = []
    refs = container_images(plan)
    installing = {x.name for x in process_hosts(plan)}
    engines = engine_hosts(plan)
    # a host without an engine process gets the wheels only (ship.ship_host)
    wheels_only = replace(want, weights=0, adapters=0,
                          files=tuple(f for f in want.files if f[0].startswith("wheels/")))
    for i, h in enumerate(plan.spec.hosts):
        if SSH in raw.get(h.name, {SSH: ""}):
            continue  # unreachable: the ssh finding says so
        if h.name in installing:
            out += host_findings(h, i, raw[h.name], want if h.name in engines else wheels_only)
        if h.runtime == "docker" and h.name in refs and want.images:
            out += docker_findings(h, i, raw[h.name], refs[h.name], want)
    pips = [ln for a in rendered.artifacts for ln in a.text.splitlines()
            if re.search(r"\bpip install\b", ln)]
    out.append(no_index(plan.name, pips))
    return tuple(out)
