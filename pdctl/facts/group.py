"""Facts about multi-node groups from raw outputs (probe/group.py writes them). Pure.

- `vllm-version.txt`: the vLLM version in the host's runtime environment;
- `ulimit-l.txt`: the locked-memory limit, KiB or `unlimited` (its last line), after a line
  `context WHERE` saying where it was measured (a system or user unit, the login shell);
- `group-reach.txt` (a group's other nodes): per group, `leader NAME ADDRESS PORT`, the route
  (`route ...`, `ip -o route get`) and `connected ADDRESS PORT` or `failed ADDRESS PORT ERRNO`;
- `group-listen.txt` (the leader's host): per group, `group NAME`, then `listening PORT` and
  one `accepted ADDRESS` per connection, or `bind-error PORT REASON`.
"""

from __future__ import annotations

import re
from typing import Any

from pdctl.preflight.facts import Listen, Reach

VLLM_VERSION = "vllm-version.txt"
MEMLOCK = "ulimit-l.txt"
REACH = "group-reach.txt"
LISTEN = "group-listen.txt"
_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?\S*$")


def parse_version(text: str) -> str:
    """The last line that looks like a version ('' when none: vLLM missing, an error)."""
    lines = [x.strip() for x in text.splitlines() if _VERSION.match(x.strip())]
    return lines[-1] if lines else ""


def parse_memlock(text: str) -> int | None:
    """KiB, -1 for unlimited, None when unreadable."""
    word = text.strip().splitlines()[-1].strip() if text.strip() else ""
    if word == "unlimited":
        return -1
    return int(word) if word.isdigit() else None


def parse_memlock_where(text: str) -> str:
    """Where the limit was measured ('' in a recording made before pdctl said so)."""
    for line in text.splitlines():
        if line.startswith("context "):
            return line[len("context ") :].strip()
    return ""


def parse_reach(text: str) -> tuple[Reach, ...]:
    out: list[Reach] = []
    head: list[str] | None = None
    route, rest = "", list[str]()
    for line in text.splitlines() + ["leader"]:
        words = line.split()
        if not words:
            continue
        if words[0] == "leader":
            if head is not None and len(head) == 4 and head[3].isdigit():
                result = next((r for r in rest if r), "error: no answer")
                out.append(Reach(head[1], head[2], int(head[3]), result, route))
            head, route, rest = words, "", []
        elif words[0] == "route":
            # `ip -o` joins its continuation lines with a backslash: keep the first
            route = line.split(None, 1)[1].split("\\")[0].strip() if len(words) > 1 else ""
        elif words[0] == "connected":
            rest.append("connected")
        elif words[0] == "failed" and len(words) >= 4:
            rest.append(words[3])
        else:
            rest.append("error: " + line.strip()[:200])
    return tuple(out)


def parse_listen(text: str) -> tuple[Listen, ...]:
    out: list[Listen] = []
    group, port, accepted, error = "", 0, 0, ""
    for line in text.splitlines() + ["group"]:
        words = line.split()
        if not words:
            continue
        if words[0] == "group":
            if group:
                out.append(Listen(group, port, accepted, error or ("" if port else "no answer")))
            group = words[1] if len(words) > 1 else ""
            port, accepted, error = 0, 0, ""
        elif words[0] == "listening" and len(words) > 1 and words[1].isdigit():
            port = int(words[1])
        elif words[0] == "accepted":
            accepted += 1
        elif words[0] == "bind-error" and len(words) > 1 and words[1].isdigit():
            port, error = int(words[1]), " ".join(words[2:]) or "bind failed"
        else:
            error = error or line.strip()[:200]
    return tuple(out)


def group_fields(raw: dict[str, str]) -> dict[str, Any]:
    """HostFacts fields from a host's raw outputs (None: not gathered)."""
    return {
        "vllm_version": parse_version(raw[VLLM_VERSION]) if VLLM_VERSION in raw else None,
        "memlock_kib": parse_memlock(raw[MEMLOCK]) if MEMLOCK in raw else None,
        "memlock_where": parse_memlock_where(raw.get(MEMLOCK, "")),
        "reach": parse_reach(raw.get(REACH, "")),
        "listen": parse_listen(raw.get(LISTEN, "")),
    }
