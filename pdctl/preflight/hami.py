"""Phase 3 on bare metal: HAMi-core's library on every host that runs a sliced decode engine
(the spec's `decode.share.library`): the probe's command, its parser and the check.

The command and the check build text and judge facts; the parser reads the probe's output, and
an ELF file's dynamic symbol table itself when the host had no `nm` (the probe then sends the
file, base64). All pure.

What can be told from the file and the host's facts, and its limits:
- it exists and is readable (else every decode engine's start.sh stops);
- it exports the hooks that cap memory (`nm -D`, or pdctl's own read of `.dynsym`): a build with
  hidden symbols (a plain CMake Release build) preloads fine and limits nothing;
- the CUDA it was built for: HAMi-core links `libcuda.so.1` and `libnvidia-ml.so.1` only (no
  versioned cudart), so the one build-time mark is in its exports: hooks it compiles only
  against CUDA < 13 headers (cuCtxCreate_v2/_v3). That tells 12-or-older from 13-or-newer and
  nothing finer. It must match the engine's CUDA major (vLLM's wheels: the runtime whose calls
  HAMi-core intercepts); a driver older than CUDA 13 cannot serve a 13 build. A 12 build under a
  CUDA 13 driver is fine as long as the engine is CUDA 12.
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import replace
from typing import Any

from pdctl.plan.model import Instance, Plan
from pdctl.preflight.facts import HOOKS, HamiLibrary, HostFacts, Missing
from pdctl.preflight.finding import Finding, HostCheck
from pdctl.render.template import quote
from pdctl.spec.model import Host, Spec

HAMI_LIBRARY = "hami-library.txt"
FUNCTION_TYPES = frozenset("TWi")  # nm: text, weak, indirect function
BUILD = "build it with HAMi-core's build.sh (a Debug build with -DDLSYM_HOOK_ENABLE=1)"


def library_command(path: str) -> str:
    """POSIX sh: whether the file exists and is readable, then its exported functions from
    `nm -D --defined-only` (`<type> <name>` lines), or, where binutils are not installed, the
    file itself in base64 for pdctl to read (elf_functions below). Exits 0 either way."""
    lib = quote(path)
    return (f'l={lib}; echo "path: $l"; '
            'if [ ! -e "$l" ]; then echo "exists: no"; exit 0; fi; echo "exists: yes"; '
            'if [ ! -r "$l" ] || [ -d "$l" ]; then echo "readable: no"; exit 0; fi; '
            'echo "readable: yes"; '
            "if command -v nm >/dev/null 2>&1; then "
            'if o=$(nm -D --defined-only "$l" 2>&1); then echo "nm:"; '
            "printf '%s\\n' \"$o\" | awk 'NF >= 3 {print $2, $3}'; "
            'else echo "error: $(printf "%s" "$o" | head -n 1)"; fi; '
            'else echo "base64:"; base64 < "$l" | tr -d "\\n"; echo; fi')


def commands(spec: Spec, host: Host) -> dict[str, str]:
    """{file: command} for a phase 3 spec on hosts that names a library; else nothing."""
    share = spec.decode.share if spec.decode is not None else None
    if spec.phase != 3 or not spec.hosts or share is None or share.library is None:
        return {}
    return {HAMI_LIBRARY: library_command(share.library)}


def parse_hami_library(text: str) -> HamiLibrary:
    """The probe's output: `path:`, `exists:`, `readable:` lines, then `nm:` and `<type> <name>`
    lines, or `base64:` and the file (or `error: ...`)."""
    head: dict[str, str] = {}
    lines = text.splitlines()
    body: list[str] = []
    mode = ""
    for i, line in enumerate(lines):
        key, sep, value = line.partition(":")
        if key in ("nm", "base64") and sep and not value.strip():
            mode, body = key, lines[i + 1 :]
            break
        if sep:
            head[key.strip()] = value.strip()
    lib = HamiLibrary(path=head.get("path", ""), exists=head.get("exists") == "yes",
                      readable=head.get("readable") == "yes", error=head.get("error", ""))
    if mode == "nm":
        names = []
        for row in body:
            parts = row.split()
            if len(parts) == 2 and parts[0] in FUNCTION_TYPES:
                names.append(parts[1].split("@", 1)[0])
            elif len(parts) == 1 and parts[0].startswith("nm"):
                return _with(lib, error=row.strip(), how="nm")
        return _with(lib, symbols=tuple(sorted(set(names))), how="nm")
    if mode == "base64":
        try:
            data = base64.b64decode("".join(body), validate=True)
            return _with(lib, symbols=elf_functions(data), how="elf")
        except (binascii.Error, ValueError, struct.error) as exc:
            return _with(lib, error=f"not an ELF shared object ({exc})", how="elf")
    return lib


def _with(lib: HamiLibrary, **changes: object) -> HamiLibrary:
    return replace(lib, **changes)  # type: ignore[arg-type]


def elf_functions(data: bytes) -> tuple[str, ...]:
    """Names of the functions an ELF64 little-endian shared object exports: the defined,
    global or weak, default- or protected-visibility FUNC/IFUNC entries of `.dynsym` (what
    `nm -D --defined-only` lists as T/W/i). ValueError when it is not such a file."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise ValueError("no ELF header")
    if data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shentsize < 64 or shoff + shnum * shentsize > len(data):
        raise ValueError("section headers out of range")
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    dynsym = next((s for s in sections if s[1] == 11), None)  # SHT_DYNSYM
    if dynsym is None:
        raise ValueError("no dynamic symbol table")
    _, _, _, _, offset, size, link, _, _, entsize = dynsym
    if link >= shnum or entsize < 24 or offset + size > len(data):
        raise ValueError("dynamic symbol table out of range")
    strtab = sections[link]
    str_off, str_size = strtab[4], strtab[5]
    if str_off + str_size > len(data):
        raise ValueError("dynamic string table out of range")
    names = set()
    for k in range(size // entsize):
        name, info, other, shndx, _, _ = struct.unpack_from("<IBBHQQ", data, offset + k * entsize)
        kind, bind, visibility = info & 0xF, info >> 4, other & 0x3
        if shndx == 0 or kind not in (2, 10) or bind not in (1, 2) or visibility in (1, 2):
            continue  # undefined, not a function, local, or hidden/internal
        if name >= str_size:
            raise ValueError("symbol name out of range")
        end = data.find(b"\0", str_off + name, str_off + str_size)
        if end < 0:
            raise ValueError("unterminated symbol name")
        names.add(data[str_off + name : end].decode("utf-8", "replace"))
    return tuple(sorted(names))


def sliced(instances: list[Instance]) -> list[Instance]:
    """The host's decode engines that run under HAMi-core."""
    return [i for i in instances if any(k == "LD_PRELOAD" for k, _ in i.env)]


def hami_library(host: Host, hf: HostFacts, plan: Plan, instances: list[Instance]) -> list[Finding]:
    if not sliced(instances):
        return []
    share = plan.spec.decode.share if plan.spec.decode is not None else None
    path = share.library if share is not None and share.library else "?"
    lib: HamiLibrary | None = hf.hami
    if lib is None:
        return [Finding("WARN", "hami.library", host.name, "HAMi-core library: not gathered",
                        f"{path} readable, exporting {', '.join(HOOKS)}",
                        "gather it live, or record it with --record")]
    if not lib.exists:
        return [Finding("FAIL", "hami.library", host.name, f"no file {lib.path}",
                        "HAMi-core's libvgpu.so at decode.share.library",
                        f"copy libvgpu.so there ({BUILD}), or fix decode.share.library")]
    if not lib.readable:
        return [Finding("FAIL", "hami.library", host.name, f"{lib.path} is not readable",
                        "a file the SSH user can read", f"chmod a+r {lib.path}")]
    if lib.symbols is None:
        return [Finding("FAIL", "hami.library", host.name,
                        f"{lib.path}: {lib.error or 'exports unreadable'}",
                        "an ELF shared object (libvgpu.so)",
                        f"point decode.share.library at libvgpu.so ({BUILD})")]
    missing = lib.missing_hooks
    if missing:
        return [Finding("FAIL", "hami.hooks", host.name,
                        f"{lib.path} exports none of {', '.join(missing)}"
                        if len(missing) == len(HOOKS) else f"{lib.path} lacks {', '.join(missing)}",
                        f"exported {', '.join(HOOKS)} (else the preload caps nothing)",
                        "rebuild: a build with hidden symbols (CMake Release) limits nothing; "
                        f"{BUILD}")]
    return [Finding("PASS", "hami.hooks", host.name,
                    f"{lib.path} exports {', '.join(HOOKS)} ({lib.how})", "the memory hooks"),
            *cuda_match(host, hf, plan, lib)]


def _major(version: str) -> int | None:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def cuda_match(host: Host, hf: HostFacts, plan: Plan, lib: HamiLibrary) -> list[Finding]:
    engine = plan.release.cuda_major
    driver = _major(hf.cuda)
    built = lib.cuda_headers
    want = f"built for CUDA {engine} (vLLM {plan.release.version}'s wheels)"
    if driver is not None:
        want += f", driver CUDA {hf.cuda}"
    if not built:
        return [Finding("WARN", "hami.cuda", host.name, "the library's CUDA is unknown", want)]
    found = f"built against CUDA {'12 or older' if built == '<13' else '13 or newer'} headers"
    wrong = []
    if (engine >= 13) != (built == ">=13"):
        wrong.append(f"the engine uses CUDA {engine}")
    if driver is not None and driver < 13 and built == ">=13":
        wrong.append(f"the driver is CUDA {hf.cuda}")  # a CUDA 12 libcuda lacks 13's calls
    if wrong:
        return [Finding("FAIL", "hami.cuda", host.name, f"{found}; {' and '.join(wrong)}", want,
                        f"rebuild HAMi-core on {host.name} against CUDA {engine} "
                        "(CUDA_HOME=/usr/local/cuda-<version> sh build.sh)")]
    return [Finding("PASS", "hami.cuda", host.name, found, want)]


def fields(raw: dict[str, str]) -> tuple[dict[str, Any], list[Missing]]:
    return {"hami": parse_hami_library(raw[HAMI_LIBRARY]) if raw.get(HAMI_LIBRARY) else None}, []


def check_host(c: HostCheck) -> list[Finding]:
    return hami_library(c.host, c.facts, c.plan, c.instances)
