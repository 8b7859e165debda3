"""Parsers for host facts outside the GPU: RDMA devices and ports, df, docker info, conda,
listening ports. Pure."""

from __future__ import annotations

import json
import re

from pdctl.preflight.facts import Disk, Docker, Port


def parse_ib_listing(text: str) -> tuple[str, ...]:
    """`ls -la /sys/class/infiniband` (or plain `ls`): the device names."""
    names = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("total "):
            continue
        fields = line.split()
        if len(fields) >= 9 and fields[0][:1] in "dl-":
            name = line.split(" -> ")[0].split()[-1]
        elif len(fields) == 1:
            name = fields[0]
        else:
            continue
        if name not in (".", ".."):
            names.append(name)
    return tuple(sorted(names))


def parse_ib_ports(text: str) -> tuple[Port, ...]:
    """Lines `<device> <port> <state file> <link_layer>`, e.g. `mlx5_0 1 4:ACTIVE InfiniBand`
    (what pdctl's probe prints from /sys/class/infiniband/*/ports/*)."""
    ports = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or not fields[1].isdigit():
            continue
        state = fields[2].split(":")[-1].strip().upper()
        ports.append(Port(fields[0], int(fields[1]), state, fields[3] if len(fields) > 3 else ""))
    return tuple(ports)


def parse_df(text: str) -> Disk | None:
    """`df -Pk PATH`: the filesystem holding PATH (sizes in KiB)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for line in lines[1:]:
        fields = line.split()
        if len(fields) >= 6 and fields[1].isdigit() and fields[3].isdigit():
            return Disk(mount=" ".join(fields[5:]), total_kib=int(fields[1]),
                        avail_kib=int(fields[3]))
    return None


def parse_du(text: str) -> int | None:
    """`du -sk PATH`: KiB used (None when nothing was printed: the path does not exist)."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0].isdigit():
            return int(fields[0])
    return None


def parse_docker_info(text: str) -> Docker:
    """`docker info --format '{{json .}}'`."""
    try:
        data = json.loads(text.strip().splitlines()[-1] if text.strip() else "{}")
    except (json.JSONDecodeError, IndexError):
        return Docker(ok=False, error="docker info printed no JSON")
    errors = data.get("ServerErrors") or []
    if errors or not data.get("ServerVersion"):
        return Docker(ok=False, error="; ".join(errors) or "no docker daemon answered")
    runtimes = tuple(sorted((data.get("Runtimes") or {}).keys()))
    return Docker(
        ok=True,
        version=str(data.get("ServerVersion", "")),
        runtimes=runtimes,
        default_runtime=str(data.get("DefaultRuntime", "")),
    )


def parse_conda(text: str) -> str:
    """`conda --version` -> '24.7.1' ('' when absent)."""
    m = re.search(r"conda\s+(\S+)", text)
    return m.group(1) if m else ""


def parse_listening(text: str) -> tuple[int, ...]:
    """TCP ports in LISTEN state, from `ss -Htln` or /proc/net/tcp{,6}."""
    ports: set[int] = set()
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if re.match(r"^\d+:$", fields[0]) and len(fields) > 3:  # /proc/net/tcp
            if fields[3] == "0A":
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        elif fields[0] == "LISTEN" and len(fields) >= 4:  # ss -Htln
            tail = fields[3].rsplit(":", 1)
            if len(tail) == 2 and tail[1].isdigit():
                ports.add(int(tail[1]))
    return tuple(sorted(ports))


def command_failure(text: str) -> str:
    """A short reason from a recorded failure file (`<name>.err`: 'exit N' then stderr)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return "failed"
    status, rest = lines[0], lines[1:]
    msg = rest[0] if rest else ""
    if status == "exit 127" or "command not found" in msg or "not found" in msg.lower():
        return f"not installed ({msg})" if msg else "not installed"
    return f"{status}: {msg}" if msg else status
