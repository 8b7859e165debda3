"""Which stage of its start an engine is in, read from its log (hosts) or its pod (Kubernetes),
and the latest meaningful line of that log. Pure: text and dicts in, words out.

The log patterns are vLLM's own messages (vllm/v1/worker/gpu_model_runner.py "Starting to
load model", "Model loading took", "Capturing CUDA graphs", "Graph capturing finished";
vllm/compilation "Dynamo bytecode transform time", "torch.compile takes"; the API server
"Starting vLLM API server", uvicorn "Application startup complete"), huggingface_hub's
"Fetching N files" progress, and the Docker CLI's pull output. tests/targets/test_stages.py
checks them on log excerpts in tests/fixtures/vllm/.
"""

from __future__ import annotations

import re
from typing import Any

# (stage, pattern), in the order an engine goes through them; the last line matching any
# pattern gives the stage.
STAGE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (stage, re.compile(pattern))
    for stage, pattern in (
        (
            "pulling image",
            r"Pulling from |Pulling fs layer|Waiting$|Download complete|Pull complete"
            r"|Status: Downloaded newer image|Unable to find image .* locally",
        ),
        (
            "downloading weights",
            r"Fetching \d+ files|Downloading .*(safetensors|\.bin|\.json)|snapshot_download"
            r"|model-\d+-of-\d+\.safetensors:",
        ),
        (
            "loading weights",
            r"Starting to load model|Loading safetensors checkpoint shards|Loading weights took"
            r"|Loading model weights|Model loading took",
        ),
        (
            "compiling",
            r"Dynamo bytecode transform time|torch\.compile takes|Compiling a graph"
            r"|Warming up model for the compilation|Compile graph"
            r"|Using cache directory: .*torch_compile",
        ),
        ("capturing graphs", r"Capturing CUDA graphs|Capturing cudagraphs|cudagraph capture"),
        (
            "starting server",
            r"Graph capturing finished|GPU KV cache size|init engine \(profile"
            r"|Starting vLLM API server|Available routes are|Waiting for application startup",
        ),
        ("serving", r"Application startup complete"),
    )
)
# Lines that say nothing about progress: health checks and metric scrapes in the access log.
NOISE = re.compile(r'"(GET|POST) /(health|metrics|v1/models|ping)[ ?]|^\s*$')
# Terminal escape sequences: CSI (colours, cursor moves: ESC [ ... final), OSC (a window
# title, a hyperlink: ESC ] ... BEL or ESC backslash), the two-character ones (ESC 7, ESC c).
ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC
    r"|\x1b[ -/]*[0-~]"  # two-character sequences
    r"|\x9b[0-?]*[ -/]*[@-~]"  # CSI as its one C1 character
)
# Other control characters, C0 and C1 (a tab, newline and carriage return are kept: the callers
# split lines on them), and a stray ESC that no sequence above took.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# vLLM's prefix: "(EngineCore_DP0 pid=212) INFO 10-06 12:00:40 [gpu_model_runner.py:3480] "
PREFIX = re.compile(r"^(\([\w ]+pid=\d+\) )?INFO \d\d-\d\d \d\d:\d\d:\d\d(\.\d+)? \[[^\]]*\] ")


def printable(text: str) -> str:
    """`text` without escape sequences and control characters (tabs become spaces), as it
    may be quoted in an error or a progress line: what a terminal would show of it."""
    return CONTROL.sub("", ANSI.sub("", text)).replace("\t", " ")


def log_lines(text: str) -> list[str]:
    """The lines of a log as a terminal shows them: colour codes and other control characters
    gone, and of a line a progress bar rewrote with carriage returns only what was written
    last."""
    out = []
    for raw in text.split("\n"):  # not splitlines(): a \r only rewrites its line
        line = printable(raw.rstrip("\r").rsplit("\r", 1)[-1]).strip()
        if line:
            out.append(line)
    return out


def stage_of(text: str, default: str = "starting") -> str:
    """The stage the last stage-telling line of `text` names; `default` when none does."""
    for line in reversed(log_lines(text)):
        for stage, pattern in reversed(STAGE_PATTERNS):
            if pattern.search(line):
                return stage
    return default


def latest_line(text: str, width: int = 160) -> str:
    """The last line of `text` that says something (no health-check access lines), without
    vLLM's INFO prefix, cut to `width`."""
    for line in reversed(log_lines(text)):
        if not NOISE.search(line):
            line = PREFIX.sub("", line)
            return line if len(line) <= width else line[: width - 3] + "..."
    return ""


def pod_stage(pod: dict[str, Any], events: list[dict[str, Any]]) -> str:
    """A pod's stage from its status and events: scheduling, pulling image, starting (the
    container runs: the log tells more), failing (a waiting reason such as ImagePullBackOff),
    healthy (Ready)."""
    st = pod.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in st.get("conditions") or []}
    if conds.get("Ready") == "True":
        return "healthy"
    if conds.get("PodScheduled") != "True":
        return "scheduling"
    statuses = (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or [])
    for cs in statuses:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason", "")
        if reason in ("ErrImagePull", "ImagePullBackOff", "CrashLoopBackOff", "InvalidImageName"):
            return "failing"
        if reason == "CreateContainerConfigError":
            return "failing"
    name = (pod.get("metadata") or {}).get("name")
    mine = [e for e in events if (e.get("involvedObject") or {}).get("name") == name]
    mine.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    if mine and mine[-1].get("reason") == "Pulling":
        return "pulling image"
    if any((cs.get("state") or {}).get("running") for cs in statuses):
        return "starting"
    return "creating"
