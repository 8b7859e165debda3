"""List or strip the CUDA binaries packed in a shared library's .nv_fatbin section, so the GPU
harness carries vLLM's kernels for one architecture only (tests/gpu/pack.sh).

A fat binary holds one entry per target: SASS for sm_75 ... sm_120 (kind 2) and PTX (kind 1).
The driver loads the entry of the device's architecture, else JIT-compiles a PTX entry; a SASS
entry of another major version never runs on it (sm_80 SASS does not run on sm_90). `strip`
overwrites the payload of every SASS entry not of the kept architectures with zeros, in place,
the section's layout unchanged: the library loads as before and compresses to a fraction (vLLM
0.23.0's four kernel libraries go from 154 MB of fat binaries to 70 MB kept for sm_90).

usage: python3 fatbin.py list LIB
       python3 fatbin.py strip LIB 90[,100]
"""

from __future__ import annotations

import struct
import sys
from collections import Counter
from collections.abc import Iterator

MAGIC = 0xBA55ED50
SASS = 2


def section(data: bytes | bytearray, name: str) -> tuple[int, int] | None:
    """(offset, size) of the ELF64 little-endian section NAME, or None."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i: int) -> tuple[int, ...]:
        return struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)

    names = header(shstrndx)[4]
    for i in range(shnum):
        h = header(i)
        start = names + h[0]
        if data[start:data.index(b"\0", start)].decode() == name:
            return h[4], h[5]
    return None


def entries(data: bytes | bytearray, off: int, size: int) -> Iterator[tuple[int, ...]]:
    """(entry offset, kind, sm, header size, padded payload size) of every entry."""
    p, end = off, off + size
    while p < end:
        magic, _, hsz, fsz = struct.unpack_from("<IHHQ", data, p)
        if magic != MAGIC:
            p += 8  # padding between fat binaries
            continue
        q, qend = p + hsz, p + hsz + fsz
        while q < qend:
            kind, _, ehsz, padded, _, _, _, _, sm = struct.unpack_from("<HHIIIIIII", data, q)
            yield q, kind, sm, ehsz, padded
            q += ehsz + padded
        p = qend


def main(argv: list[str]) -> int:
    mode, path = argv[0], argv[1]
    keep = {int(x) for x in argv[2].split(",")} if len(argv) > 2 else {90}
    data = bytearray(open(path, "rb").read())
    found = section(data, ".nv_fatbin")
    if found is None:
        print(f"{path}: no .nv_fatbin section")
        return 0
    sizes: Counter[tuple[int, int]] = Counter()
    zeroed = 0
    for q, kind, sm, ehsz, padded in entries(data, *found):
        sizes[(kind, sm)] += padded
        if mode == "strip" and kind == SASS and sm not in keep:
            data[q + ehsz:q + ehsz + padded] = bytes(padded)
            zeroed += padded
    for (kind, sm), n in sorted(sizes.items()):
        print(f"{path}: {'SASS' if kind == SASS else 'PTX'} sm_{sm} {n / 1e6:.1f} MB")
    if mode == "strip":
        with open(path, "wb") as f:
            f.write(data)
        print(f"{path}: zeroed {zeroed / 1e6:.1f} of {found[1] / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
