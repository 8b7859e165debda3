"""The line that tells why an engine died, picked from the last lines of its log (pure).

A crashed engine's log rarely ends with its cause: systemd adds its own lines ("pdctl-x.service:
Failed with result 'exit-code'."), vLLM's API server ends with a wrapper ("RuntimeError: Engine
core initialization failed. See root cause above"), pydantic with a link, and a process log
(start scripts append to it) may hold the previous run's lines. So: only the last run's lines
(after the start marker the start script writes, or systemd's "Started" line), none of those
wrappers, and of vLLM's messages its first ERROR (e.g. "EngineCore failed to start.") with the
exception its traceback ends with (docs/phase0-hosts.md, "When an engine dies")."""

from __future__ import annotations

import re

from pdctl.targets.stages import log_lines

# written into a process unit's log by templates/process-start.sh.j2 before each start
MARKER = "==> pdctl: starting"

# systemd's own lines in a unit's journal (journalctl -o cat): "pdctl-x.service: Main process
# exited, code=exited, status=1/FAILURE", "Started pdctl-x.service - ...", "Stopped ...".
SYSTEMD = re.compile(
    r"^(\S+\.service: "
    r"|(Started|Starting|Stopped|Stopping|Failed to start|Deactivated) .*\.service\b)"
)
SYSTEMD_START = re.compile(r"^(Started|Starting) \S+\.service\b")
# vLLM's logger: "(EngineCore_DP0 pid=12) ERROR 12-05 17:30:00 [core.py:866] message"
VLLM_ERROR = re.compile(r"\bERROR \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ?(.*)$")
EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(: .+)?$")
NOISE = (
    re.compile(r"See root cause above"),  # vLLM's wrapper of the engine core's failure
    re.compile(r"^For further information visit https://errors\.pydantic\.dev/"),
    re.compile(r"^(\S+: )?(Run|See|Try) '[^']*--help'( for more information)?\.?$", re.I),
)


def last_run(lines: list[str]) -> list[str]:
    """The lines after the last start marker (or systemd's "Started"/"Starting" line)."""
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(MARKER) or SYSTEMD_START.match(lines[i]):
            return lines[i + 1:]
    return lines


def _content(line: str) -> str:
    m = VLLM_ERROR.search(line)
    return m.group(1).strip() if m else line


def _cause(lines: list[str]) -> str:
    """The first exception line (a traceback's last line), with pydantic's detail line."""
    for i, line in enumerate(lines):
        text = _content(line)
        if EXCEPTION.match(text):
            if re.search(r"validation errors? for \S+$", text) and i + 1 < len(lines):
                text += f": {_content(lines[i + 1])}"
            return text
    return ""


def telling_line(text: str) -> str:
    """The most telling line of a dead engine's log tail `text` ('' when it has none)."""
    lines = [
        line for line in last_run(log_lines(text))
        if not SYSTEMD.match(line) and not any(p.search(line) for p in NOISE)
    ]
    if not lines:
        return ""
    for i, line in enumerate(lines):
        m = VLLM_ERROR.search(line)
        if m:
            first, cause = m.group(1).strip(), _cause(lines[i + 1:])
            return f"{first} {cause}" if cause and cause not in first else first
    return _cause(lines) or lines[-1]
