"""`up --docker-url`: where each engine is while `up` waits (the same stage lines as the hosts
target), one deadline for all engines, and `stopping` while `down` stops a container. Against
the real test dockerd with the stand-in engine (test_docker.py), steered through its HF cache
folder: `listen` (address:port), `log` (printed first), `hold` (no serving while it exists).

No timing is assumed: the engine is held until the test has seen pdctl show its stage.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import checked
from tests.targets.docker.bed import docker_spec, remove_all, urls
from tests.targets.docker.test_target import free_port
from tests.targets.hosts.test_up_progress import LOADING, follow
from tests.targets.testbed import pdctl


def stage_lines(out: str, timeout: int) -> list[str]:
    """`[  3s/200s] unit on host: stage | line` lines, without the time."""
    return [
        x.split("] ", 1)[1] for x in out.splitlines() if re.match(rf"\[ *\d+s/{timeout}s\] ", x)
    ]


def test_up_piped_shows_each_docker_engines_stage(docker_client, tmp_path: Path):
    spec = docker_spec(tmp_path, "dprog", {"local": "127.0.0.1"}, free_port())
    ctl = tmp_path / "hf-local" / "standin"
    (ctl / "log").write_text(LOADING + "\n")
    (ctl / "hold").touch()
    cmd = [sys.executable, "-m", "pdctl", "up", str(spec), "--yes", "--timeout", "200"]
    proc = subprocess.Popen(
        [*cmd, *urls("local")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=dict(os.environ, COLUMNS="200"),
    )
    assert proc.stdout is not None
    try:
        out = follow(proc.stdout.fileno(), proc, [("loading weights", (ctl / "hold").unlink)])
        assert proc.wait(60) == 0, out
        stages = stage_lines(out, 200)
        assert "dprog-serve-0 on local: loading weights | Starting to load model stand-in..." in (
            stages
        ), out
        assert stages[-1] == "dprog-serve-0 on local: healthy", out
        assert "\x1b[" not in out
        down = checked(pdctl("down", str(spec), *urls("local")))
        # `[   0s/30s] dprog-serve-0 on local: stopping`
        assert re.search(r"\] dprog-serve-0 on local: stopping", down.stdout), down.stdout
    finally:
        proc.kill()
        remove_all(docker_client, "dprog")


def test_one_deadline_for_the_engines_of_all_hosts(docker_client, tmp_path: Path):
    """Two docker hosts (two spec hosts on the one test engine, at 127.0.0.1 and 127.0.0.2):
    the first never serves. The second is watched (and found healthy) while the first is
    still waited for, and the run fails once, naming the first and the timeout."""
    spec = docker_spec(tmp_path, "dwait", {"a": "127.0.0.1", "b": "127.0.0.2"}, free_port())
    (tmp_path / "hf-a" / "standin" / "hold").touch()
    try:
        up = checked(pdctl("up", str(spec), "--yes", "--timeout", "6", *urls("a", "b")), 1)
        stages = stage_lines(up.stdout, 6)
        assert "dwait-serve-1 on b: healthy" in stages, up.stdout
        assert any(s.startswith("dwait-serve-0 on a: starting") for s in stages), up.stdout
        assert "not healthy after 6 s" in up.stderr, up.stderr
        failed = up.stderr.split("; stopped what this run started")[0]  # then the undo
        assert failed.count("dwait-serve-0") == 1 and "dwait-serve-1" not in failed, up.stderr
        # the run was undone: both containers removed
        left = docker_client.containers.list(
            all=True, filters={"label": "pdctl.io/deployment=dwait"}
        )
        assert left == []
    finally:
        remove_all(docker_client, "dwait")
