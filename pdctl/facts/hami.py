"""HAMi-core's library on a host (phase 3 on bare metal): what the probe found at the spec's
`decode.share.library`. Pure: parses the probe's output, and reads an ELF file's dynamic symbol
table itself when the host had no `nm` (the probe then sends the file, base64)."""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass

HAMI_LIBRARY = "hami-library.txt"
# The hooks that make HAMi-core cap memory: allocation, the memory query vLLM sizes its KV cache
# from, and the entry point CUDA 12+ runtimes resolve every driver call through. A Release build
# (-fvisibility=hidden) exports none of them, and the preload then limits nothing.
HOOKS = ("cuMemAlloc_v2", "cuMemGetInfo_v2", "cuGetProcAddress")
# HAMi-core compiles these hooks only against CUDA < 13 headers (`#if CUDA_VERSION < 13000` in
# src/cuda/context.c and src/libvgpu.c @8f3a89c): the only build-time CUDA mark in its exports.
BEFORE_13 = ("cuCtxCreate_v2", "cuCtxCreate_v3")
FUNCTION_TYPES = frozenset("TWi")  # nm: text, weak, indirect function


@dataclass(frozen=True)
class HamiLibrary:
    path: str
    exists: bool = False
    readable: bool = False
    symbols: tuple[str, ...] | None = None  # defined dynamic function symbols; None: unread
    how: str = ""  # "nm" or "elf" (pdctl read the file)
    error: str = ""  # why the symbols could not be read

    @property
    def missing_hooks(self) -> tuple[str, ...]:
        have = set(self.symbols or ())
        return tuple(h for h in HOOKS if h not in have)

    @property
    def cuda_headers(self) -> str:
        """'<13' or '>=13': the CUDA headers HAMi-core was built with, from its exports; ''
        when its exports say nothing (no hooks at all)."""
        if not self.symbols or self.missing_hooks:
            return ""
        return "<13" if any(s in self.symbols for s in BEFORE_13) else ">=13"


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
    lib = HamiLibrary(
        path=head.get("path", ""),
        exists=head.get("exists") == "yes",
        readable=head.get("readable") == "yes",
        error=head.get("error", ""),
    )
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
    from dataclasses import replace

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
        struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
    ]
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
