"""Parsers for `nvidia-smi topo -m`, `topo -p2p r|w` and `nvlink -s`. Pure.

The tables are tab-separated; the header may be wrapped in ANSI underline escapes; GPU rows
end with CPU affinity, NUMA affinity, an empty field and the GPU NUMA ID; NIC rows end in empty
fields; published dumps may be truncated (missing NIC rows)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pdctl.facts.gpu import strip_ansi

DEVICE = re.compile(r"^(GPU|NIC)(\d+)$")
LINK = re.compile(r"Link\s+(\d+):\s*(.*)$")


@dataclass(frozen=True)
class Matrix:
    """`topo -m`: GPU-to-GPU levels, per-GPU CPU/NUMA affinity, NIC names."""

    links: tuple[tuple[int, int, str], ...]
    numa: dict[int, int]
    cpus: dict[int, str]
    nics: tuple[str, ...]
    nic_links: tuple[tuple[int, str, str], ...]  # (gpu, nic name, level)


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    """Header cells and rows (cells stripped, empty fields kept) of the first table."""
    lines = strip_ansi(text).splitlines()
    header: list[str] | None = None
    rows: list[list[str]] = []
    for line in lines:
        if not line.strip():
            if header is not None:
                break
            continue
        if line.strip().startswith("Legend"):
            break
        cells = [c.strip() for c in line.split("\t")]
        if header is None:
            header = cells
        else:
            rows.append(cells)
    return header or [], rows


def parse_topo_matrix(text: str) -> Matrix:
    header, rows = _table(text)
    # Header: '', GPU0.., NIC0.., 'CPU Affinity', 'NUMA Affinity', 'GPU NUMA ID'
    columns = [c for c in header[1:] if c]
    devices = [c for c in columns if DEVICE.match(c)]
    nic_names = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)", strip_ansi(text), re.M))
    links: dict[tuple[int, int], str] = {}
    nic_links = []
    numa: dict[int, int] = {}
    cpus: dict[int, str] = {}
    for cells in rows:
        name = cells[0]
        m = DEVICE.match(name)
        if not m or m.group(1) != "GPU":
            continue
        a = int(m.group(2))
        values = cells[1 : 1 + len(devices)]
        for col, value in zip(devices, values, strict=False):
            cm = DEVICE.match(col)
            assert cm is not None
            if value in ("X", ""):
                continue
            if cm.group(1) == "GPU":
                b = int(cm.group(2))
                links.setdefault((min(a, b), max(a, b)), value)
            else:
                nic_links.append((a, nic_names.get(col, col), value))
        rest = cells[1 + len(devices) :]
        if rest:
            cpus[a] = rest[0]
        if len(rest) > 1 and rest[1].isdigit():
            numa[a] = int(rest[1])
    nics = tuple(nic_names.get(c, c) for c in devices if c.startswith("NIC"))
    return Matrix(
        links=tuple((a, b, lv) for (a, b), lv in sorted(links.items())),
        numa=numa,
        cpus=cpus,
        nics=nics,
        nic_links=tuple(nic_links),
    )


def parse_p2p(text: str) -> tuple[tuple[int, int, str], ...]:
    """`nvidia-smi topo -p2p r` (or w): (a, b, status) for every ordered GPU pair."""
    header, rows = _table(text)
    columns = [c for c in header[1:] if c]
    out = []
    for cells in rows:
        m = DEVICE.match(cells[0])
        if not m:
            continue
        a = int(m.group(2))
        for col, value in zip(columns, cells[1 : 1 + len(columns)], strict=False):
            cm = DEVICE.match(col)
            if cm and value not in ("X", ""):
                out.append((a, int(cm.group(2)), value))
    return tuple(out)


def parse_nvlink(text: str) -> dict[int, int]:
    """`nvidia-smi nvlink -s`: active links per GPU (a link with a speed is active)."""
    counts: dict[int, int] = {}
    current: int | None = None
    for line in strip_ansi(text).splitlines():
        m = re.match(r"^GPU (\d+):", line)
        if m:
            current = int(m.group(1))
            counts[current] = 0
            continue
        lm = LINK.search(line)
        if lm and current is not None and re.search(r"\d\s*GB/s", lm.group(2)):
            counts[current] += 1
    return counts
