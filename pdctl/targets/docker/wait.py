"""Wait until the engine containers of every Docker host are healthy, with one deadline.

All containers are looked at in each round (the second host's engines are not left waiting
while the first's load): a container that exited fails the run at once with its last log
lines, and so does one that Docker restarted (its restart policy) since this run started it
or first looked at it: an engine that dies while loading would otherwise load again and again
until the deadline. A healthy one is reported `healthy`; the others with the stage their log
tells (pdctl.targets.stages), the log read at most every LOOK seconds per container. Rounds
start with short pauses (an engine up in a second is seen then), doubled up to POLL.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pdctl.errors import PdctlError
from pdctl.targets.base import Stage
from pdctl.targets.health import FIRST_PAUSE, LOOK
from pdctl.targets.stages import latest_line, stage_of

if TYPE_CHECKING:
    from pdctl.targets.docker.engine import Engine

POLL = 2.0  # the longest pause between two rounds


def restart_policy(container: object) -> str:
    """The container's restart policy as `docker run --restart` writes it."""
    policy = (getattr(container, "attrs", {}).get("HostConfig") or {}).get("RestartPolicy") or {}
    name, retries = policy.get("Name") or "no", policy.get("MaximumRetryCount") or 0
    return f"{name}:{retries}" if retries else name


Healthy = Callable[[str, str], bool]  # (host, container name) -> answers /health and the model


def wait_healthy(
    targets: dict[str, Engine], names: list[tuple[str, str]], timeout: float, healthy: Healthy,
    say: Callable[[str], None] = lambda _m: None, stage: Callable[[Stage], None] = lambda _s: None,
) -> None:
    """Until each (host, container) in `names` is healthy, or `timeout` seconds from now."""
    begun = time.monotonic()
    deadline = begun + timeout
    looked: dict[tuple[str, str], float] = {}
    restarts: dict[tuple[str, str], int] = {}  # the restart count each was first seen with
    pending = list(names)
    pause = FIRST_PAUSE
    while pending:
        for host, name in list(pending):
            tgt = targets[host]
            c = tgt.client.containers.get(name)
            code = c.attrs["State"].get("ExitCode")
            if c.status in ("exited", "dead"):
                raise PdctlError(
                    f"{name}: the container exited (status {code}); "
                    f"last log lines:\n{tgt.tail(name, 20)}"
                )
            count = int(c.attrs.get("RestartCount") or 0)
            first = restarts.setdefault((host, name), 0 if name in tgt.started else count)
            if c.status == "restarting" or count > first:
                raise PdctlError(
                    f"{name}: the container exited (status {code}) and Docker restarted it "
                    f"(restart policy {restart_policy(c)}); last log lines:\n{tgt.tail(name, 20)}"
                )
            if healthy(host, name):
                pending.remove((host, name))
                say(f"{name} on {host}: healthy")
                stage(Stage(name, host, "healthy", "", time.monotonic() - begun, timeout))
                continue
            now = time.monotonic()
            if now - looked.get((host, name), -LOOK) >= LOOK:
                looked[(host, name)] = now
                log = tgt.tail(name, 50)
                stage(Stage(name, host, stage_of(log), latest_line(log), now - begun, timeout))
        if pending and time.monotonic() > deadline:
            late = ", ".join(f"{n} on {h}" for h, n in pending)
            host, name = pending[0]
            whose = f" of {name}" if len(pending) > 1 else ""
            raise PdctlError(
                f"{late}: not healthy after {int(timeout)} s; last log lines{whose}:\n"
                f"{targets[host].tail(name, 20)}"
            )
        if pending:
            time.sleep(pause)
            pause = min(pause * 2, POLL)
