"""The GPU harness's offline path (issue 38): vLLM comes to the GPU machine as a `pdctl bundle`.

usage: python3 tests/gpu/offline.py spec OUT.yaml            # the spec the bundle is made for
       python3 tests/gpu/offline.py facts LIST WHEELS REC   # REC/<host>/bundle.txt of the image
       python3 tests/gpu/offline.py pdctl-deps LIST DIR     # pdctl's own wheels the image lacks
       python3 tests/gpu/offline.py layout BUNDLE EXTRA OUT # one folder per device call
       python3 tests/gpu/offline.py check OUT IMAGE_LIST    # the device's side, simulated here

`spec`: phase 2's spec (drive.py phase2, NIXL): prefill and decode on the machine's two loopback
"hosts" with the image's venv (PDCTL_GPU_VENV, /opt/torch/.venv) as their runtime venv, behind
vllm-router in the same venv. `pdctl bundle` resolves from it everything the scenarios install:
vLLM 0.23.0 and NIXL in the engines' environment, vllm-router in the router's. The deployment is
named `gbundle`, its ports differ from the scenarios', so `up --bundle` of it installs without
touching what the scenarios deploy.

The bundle itself is made and installed by pdctl (`pdctl bundle`, `pdctl up --bundle`); this
file only says what the harness's machine is and cuts the result into the device tool's calls.

`facts`: what the image already has, as the recording `pdctl bundle --facts REC
--skip-installed` reads (each host's `bundle.txt`, the format `pdctl preflight --record`
writes: docs/offline.md). LIST is tests/gpu/image-packages.txt, one distribution a line: `NAME`
or `NAME==VERSION`. A pinned line's version is the image's (torch 2.11.0+cu130); a bare name
is listed only where a pinned distribution's wheel in WHEELS (the closure `pdctl bundle`
resolved without --skip-installed) pins it with `==`, directly or through a pinned package's
extras (torch 2.11.0 pins triton, cuda-toolkit[cublas,...]==13.0.2 and through it the nvidia-*
CUDA wheels: the image installed torch with exactly those). A bare name that nothing pins
is not listed, so its wheel stays in the bundle: the image's version of it is unknown (its list
was taken without versions), and a wheel left out that the image holds at a version the
closure does not accept would stop pip with no index. `h200.sh setup-bundle` records the image's
real list (`image-dists.txt` in the results, preflight's `bundle.txt`) to pin more next time.

`pdctl-deps`: pdctl itself runs on the machine (drive.py) before vLLM is there: the wheels of
its own dependencies for Python 3.12, less the names the image has, for `pip install --no-deps
--no-index` (as pack.sh carried them).

`layout`: the bundle folder's files (with `--split`, no file over one call) and the EXTRA folder
(sshd's .debs, pdctl's dependencies) into OUT/1, OUT/2, ... of at most CALL bytes each: OUT/1
holds EXTRA and the manifest, every folder keeps the bundle's paths under `bundle/`, so that
`h200.sh stash` of each folder, in any order, rebuilds ~/stash/bundle.

`check`: what setup-bundle does with the folders, where there is no GPU: copies OUT/* into one
temporary folder as `stash` does, joins the parts and checks every file against the manifest
(pdctl's own `manifest.verify`, what `up --bundle` runs), installs pdctl's dependencies with
`--no-index --no-deps` into a throw-away target, and asks pip, with no index, to resolve each
environment of the manifest from the bundle's wheels for the image's Python and platform
(`pip install --dry-run --target`), the wheels the manifest says the image has standing in as
empty wheels of that name and version (torch with the image's local label).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pdctl.offline.download import platforms  # noqa: E402
from tests.gpu import drive  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# What one device call carries beside the working tree (~14 MiB; the tool's limit is 64 MiB).
CALL = 48 * 2**20

NAME = "gbundle"
# What bundle.txt says of the image besides its packages (tests/fixtures/gpu/*/machine.txt:
# Ubuntu 24.04, glibc 2.39, x86_64, Python 3.12 in /opt/torch/.venv).
PYTHON, GLIBC, MACHINE = "3.12", "2.39", "x86_64"


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def spec() -> dict:
    """drive.py's phase 2 (NIXL) spec, renamed and on other ports."""
    return {
        **drive.header(NAME, 2),
        "hosts": [drive.host(0, "h200a", [0]), drive.host(1, "h200b", [0])],
        # both on GPU 0: a fixed KV size (drive.SHARED_GPU_ARGS), or each engine's profile
        # counts the other's weights and both fail with "No available memory for the cache
        # blocks" (the first H100 run of setup-bundle, 2026-12-07)
        "prefill": {"replicas": 1, "hosts": ["h200a"], "port": 8100,
                    "gpuMemoryUtilization": 0.42, "extraArgs": drive.SHARED_GPU_ARGS},
        "decode": {"replicas": 1, "hosts": ["h200b"], "port": 8200,
                   "gpuMemoryUtilization": 0.42, "extraArgs": drive.SHARED_GPU_ARGS},
        "disaggregation": {"connector": "nixl"},
        "router": {"venv": drive.VENV, "port": 8400, "metricsPort": 8401},
    }


def image_list(path: Path) -> dict[str, str]:
    """tests/gpu/image-packages.txt: canonical name -> pinned version ('' for a bare name)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[canon(name)] = version.strip()
    return out


def requires(wheel: Path) -> list[str]:
    """A wheel's Requires-Dist lines."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    return [ln.split(":", 1)[1].strip() for ln in text.splitlines()
            if ln.startswith("Requires-Dist:")]


PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^]]*)\])?\s*\(?\s*==\s*([^,;\s)]+)\s*\)?")


def pins(wheel: Path, extras: frozenset[str]) -> list[tuple[str, frozenset[str], str]]:
    """(canonical name, extras asked, version or `V.*`) of each `NAME[EXTRAS]==V` requirement
    of a wheel that applies on the image (Linux): no extra in its marker, or one of `extras`."""
    out = []
    for req in requires(wheel):
        spec, _, marker = req.partition(";")
        m = PIN.fullmatch(spec.strip())
        wants = set(re.findall(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker))
        if m and (not wants or wants & extras):
            asked = frozenset(e.strip() for e in (m.group(2) or "").split(",") if e.strip())
            out.append((canon(m.group(1)), asked, m.group(3)))
    return out


def matches(have: str, pin: str) -> bool:
    """Whether a wheel's version is the one `==pin` asks for (`V.*`: V or V.anything)."""
    if pin.endswith(".*"):
        return have == pin[:-2] or have.startswith(pin[:-1])
    return have == pin


def image_versions(image: dict[str, str], wheels: Path) -> dict[str, str]:
    """The image's packages whose version is known: pinned in the list, or pinned with == (a
    `V.*` too) by a known one's wheel in the closure, through the extras it asks for (torch ->
    cuda-toolkit[cublas,...]==13.0.2 -> nvidia-cublas==13.1.0.3.*): the image installed torch
    with them. Such a package's version is its wheel's, which pip resolved for the pin."""
    known = {n: v for n, v in image.items() if v}
    found = {canon(w.name.split("-")[0]): w for w in wheels.glob("*.whl")}
    queue = [(n, frozenset[str]()) for n in sorted(known)]
    seen = set()
    while queue:
        name, extras = queue.pop()
        if (name, extras) in seen or name not in found:
            continue
        seen.add((name, extras))
        for dep, asked, version in pins(found[name], extras):
            if dep not in found:
                continue
            have = found[dep].name.split("-")[1]
            if not matches(have, version):
                continue
            if dep in image and dep not in known:
                known[dep] = have
            queue.append((dep, asked))
    return known


def bundle_txt(versions: dict[str, str]) -> str:
    """One host's bundle.txt, as `pdctl preflight --record` writes it: the image's venv, its
    Python, glibc and machine, and a `dist` line for each package whose version is known."""
    lines = [f"from {drive.VENV}/bin/python", f"python {PYTHON}", f"glibc glibc {GLIBC}",
             f"machine {MACHINE}", "free 60000000", "mount /", f"env {drive.VENV}"]
    lines += [f"dist {name} {versions[name]}" for name in sorted(versions)]
    return "\n".join([*lines, "dists listed", ""])


def facts(image_file: Path, wheels: Path, rec: Path) -> list[str]:
    """REC/<host>/bundle.txt for both hosts of spec(); the names it lists."""
    text = bundle_txt(image_versions(image_list(image_file), wheels))
    for host in spec()["hosts"]:
        (rec / host["name"]).mkdir(parents=True, exist_ok=True)
        (rec / host["name"] / "bundle.txt").write_text(text)
    return [ln.split()[1] for ln in text.splitlines() if ln.startswith("dist ")]


def pdctl_deps(image_file: Path, dest: Path) -> list[str]:
    """pdctl's dependencies (pyproject.toml) resolved for Python 3.12 on the image's platform
    into dest, less the names the image has; the wheels kept."""
    import tomllib  # Python 3.11+: bundle.sh's side only

    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    shutil.rmtree(dest, ignore_errors=True)
    tags = [a for t in platforms(f"manylinux_{GLIBC.replace('.', '_')}_{MACHINE}")
            for a in ("--platform", t)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
                    "--python-version", PYTHON, "--implementation", "cp", *tags,
                    "-d", str(dest), *wanted], check=True)
    image = image_list(image_file)
    kept = []
    for wheel in sorted(dest.glob("*.whl")):
        if canon(wheel.name.split("-")[0]) in image:
            wheel.unlink()
        else:
            kept.append(wheel.name)
    return kept


def layout(bundle: Path, extra: Path, out: Path, call: int = CALL) -> list[list[tuple[str, int]]]:
    """The files of `extra` and of `bundle` (under bundle/) into out/1, out/2, ...: first fit,
    largest first, each folder at most `call` bytes; extra and the manifest go to the first.
    Returns each folder's (path, size)."""
    first = [(p, f"{p.relative_to(extra).as_posix()}") for p in sorted(extra.rglob("*"))
             if p.is_file()]
    first.append((bundle / "manifest.json", "bundle/manifest.json"))
    rest = sorted(((p, f"bundle/{p.relative_to(bundle).as_posix()}")
                   for p in bundle.rglob("*") if p.is_file() and p.name != "manifest.json"),
                  key=lambda x: (-x[0].stat().st_size, x[1]))
    bins: list[list[tuple[Path, str]]] = [first]
    used = [sum(p.stat().st_size for p, _ in first)]
    if used[0] > call:
        raise SystemExit(f"{extra} and the manifest take {used[0]} bytes: more than one call")
    for path, rel in rest:
        size = path.stat().st_size
        if size > call:
            raise SystemExit(f"{path}: {size} bytes, more than one call ({call}): bundle with "
                             "a smaller --split")
        i = next((i for i, u in enumerate(used) if u + size <= call), len(used))
        if i == len(used):
            bins.append([])
            used.append(0)
        bins[i].append((path, rel))
        used[i] += size
    shutil.rmtree(out, ignore_errors=True)
    made = []
    for i, files in enumerate(bins, 1):
        for path, rel in files:
            dest = out / str(i) / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                dest.hardlink_to(path)
            except OSError:
                shutil.copyfile(path, dest)
        made.append([(rel, path.stat().st_size) for path, rel in files])
    return made


def stub(folder: Path, dist: str, version: str) -> None:
    """An empty wheel of dist==version: what the image has installed, for pip's resolver."""
    name = re.sub(r"[-.]+", "_", dist)
    tag = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        z.writestr(f"{tag}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        z.writestr(f"{tag}/WHEEL", "Wheel-Version: 1.0\nGenerator: offline.py\nRoot-Is-Purelib: "
                   "true\nTag: py3-none-any\n")
        z.writestr(f"{tag}/RECORD", "")


def check(out: Path, image_file: Path, work: Path) -> bool:
    """The device's side without a GPU (see the module's docstring); True when it all holds."""
    from pdctl.offline import manifest as mf

    stash = work / "stash"
    for folder in sorted(out.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0):
        if folder.is_dir() and folder.name.isdigit():
            shutil.copytree(folder, stash, dirs_exist_ok=True)
    made = mf.verify(stash / "bundle")
    print(f"{stash}/bundle: {len(made.files)} files joined and checked against the manifest "
          f"({made.total() / 2**20:.1f} MiB)")
    py = ["--python-version", made.python, "--implementation", "cp", "--only-binary=:all:",
          *(a for t in platforms(made.platform) for a in ("--platform", t))]
    ok = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                         *py, "--target", str(work / "pdctl-deps"),
                         *map(str, sorted((stash / "pdctl-wheels").glob("*.whl")))]).returncode == 0
    print(f"pdctl's dependencies: {'installed' if ok else 'FAILED'} (--no-index --no-deps)")
    have = work / "image"
    have.mkdir()
    pinned = {n: v for n, v in image_list(image_file).items() if v}
    for left in made.skipped:
        dist, _, version = left.dist.partition("==")
        stub(have, dist, pinned.get(dist, version))
    for what, pips in made.needs:
        got = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index",
                              "--ignore-installed", *py, "--target", str(work / "t"),
                              "--find-links", str(stash / "bundle/wheels"), "--find-links",
                              str(have), *pips], capture_output=True, text=True)
        lines = got.stdout.strip().splitlines() + got.stderr.strip().splitlines()
        print(f"{what}: pip install --no-index {' '.join(pips)}: exit {got.returncode}; "
              f"{lines[-1] if lines else ''}"[:400])
        would = lines[-1].split()[2:] if lines and lines[-1].startswith("Would install") else []
        stubs = {w.name.split("-")[0].lower() for w in have.glob("*.whl")}
        mine = [w for w in would if w.rsplit("-", 1)[0].replace("-", "_").lower() in stubs]
        print(f"  {len(would)} distributions, the image's (left out) among them: {' '.join(mine)}")
        ok = ok and got.returncode == 0
    return ok


def main(argv: list[str]) -> int:
    if argv[:1] == ["spec"] and len(argv) == 2:
        Path(argv[1]).write_text(yaml.safe_dump(spec(), sort_keys=False))
        return 0
    if argv[:1] == ["facts"] and len(argv) == 4:
        listed = facts(Path(argv[1]), Path(argv[2]), Path(argv[3]))
        print(f"{argv[3]}: the image's {len(listed)} packages the closure has or the list pins")
        return 0
    if argv[:1] == ["pdctl-deps"] and len(argv) == 3:
        kept = pdctl_deps(Path(argv[1]), Path(argv[2]))
        print(f"{argv[2]}: {len(kept)} wheels of pdctl's dependencies the image lacks, "
              f"{sum((Path(argv[2]) / k).stat().st_size for k in kept) / 2**20:.1f} MiB")
        return 0
    if argv[:1] == ["layout"] and len(argv) == 4:
        made = layout(Path(argv[1]), Path(argv[2]), Path(argv[3]))
        for i, files in enumerate(made, 1):
            print(f"{argv[3]}/{i}: {len(files)} files, "
                  f"{sum(s for _, s in files) / 2**20:.1f} MiB")
        total = sum(s for files in made for _, s in files)
        print(f"{len(made)} device calls, {total / 2**20:.1f} MiB in all: carry {argv[3]}/1 "
              f"... {argv[3]}/{len(made)}, one a call, back to back")
        return 0
    if argv[:1] == ["check"] and len(argv) == 3:
        import tempfile

        with tempfile.TemporaryDirectory() as work:
            return 0 if check(Path(argv[1]), Path(argv[2]), Path(work)) else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
