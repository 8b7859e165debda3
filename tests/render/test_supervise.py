"""Supervision as rendered: systemd unit files that `systemd-analyze verify` accepts, ordering
by stage, no unit under `supervise: none`, and the nohup'd log's rotation (run for real)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from pdctl.render.supervise import unit_path
from tests.helpers import bundle_of, written

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def spec_with(tmp_path: Path, example: str, **host: object) -> Path:
    data = yaml.safe_load((EXAMPLES / example).read_text())
    for h in data["hosts"]:
        h.update(host)
    out = written(tmp_path / example, yaml.safe_dump(data, sort_keys=False))
    return out


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
@pytest.mark.parametrize("example", ["phase0-conda.yaml", "phase2-mooncake-tcp.yaml"])
def test_unit_files_verify(example: str, tmp_path: Path) -> None:
    _, bundle = bundle_of(EXAMPLES / example)
    units = [a for a in bundle if a.path.endswith(".service")]
    assert units
    for artifact in units:
        # verify resolves ExecStart/WorkingDirectory: the unit as installed for root (%h=/root)
        # with the paths it names present.
        name = artifact.path.rsplit("/", 1)[1]
        text = artifact.text
        for line in text.splitlines():
            if line.startswith(("ExecStart=", "ExecStop=")):
                script = Path(line.split()[-1].replace("%h", str(tmp_path)))
                script.parent.mkdir(parents=True, exist_ok=True)
                script.write_text("#!/bin/bash\n")
        (tmp_path / name).write_text(text.replace("%h", str(tmp_path)))
        out = subprocess.run(
            ["systemd-analyze", "verify", "--man=no", str(tmp_path / name)], capture_output=True,
            text=True,
        )
        said = [
            line for line in (out.stdout + out.stderr).splitlines() if name in line
        ]  # what it says of this unit (not of the host's own units)
        assert out.returncode == 0 and not said, out.stdout + out.stderr
        assert "RestartSteps" not in text  # systemd 252 has no such key: the drop-in has it


def test_stores_start_before_engines_and_engines_before_the_router() -> None:
    _, bundle = bundle_of(EXAMPLES / "phase2-mooncake-tcp.yaml")
    units = {a.path.rsplit("/", 1)[1]: a.text for a in bundle if a.path.endswith(".service")}
    router = next(t for n, t in units.items() if "router" in n)
    engine = next(t for n, t in units.items() if "prefill" in n)
    master = next((n for n in units if "master" in n), None)
    assert "After=network-online.target" in router and "prefill" in router.split("Before=")[0]
    if master is not None and master.split("-")[1] in engine:
        assert master in engine.split("\n[Service]")[0]


def test_supervise_none_has_no_unit(tmp_path: Path) -> None:
    _, bundle = bundle_of(spec_with(tmp_path, "phase0-conda.yaml", supervise="none"))
    assert not [a for a in bundle if a.path.endswith((".service", "serve.sh", "halt.sh"))]
    start = next(a.text for a in bundle if a.path.endswith("start.sh"))
    assert "systemctl" not in start
    stop = next(a.text for a in bundle if a.path.endswith("stop.sh"))
    assert "systemctl" not in stop


def test_unit_paths() -> None:
    assert unit_path("~/.pdctl/x") == "%h/.pdctl/x"
    assert unit_path("/srv/100%/x") == "/srv/100%%/x"


def test_nohup_log_rotates_at_the_spec_limits(tmp_path: Path) -> None:
    """start.sh (supervise: none) run for real: an engine writing ~40 KB of output leaves at
    most logMaxFiles files of about logMaxSize each."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    chatty = venv / "bin" / "vllm"
    line = "line $i of 40 bytes padded ...."
    chatty.write_text(f'#!/bin/sh\nfor i in $(seq 1000); do echo "{line}"; done\n')
    chatty.chmod(0o755)
    spec = spec_with(
        tmp_path, "phase0-conda.yaml", supervise="none", runtime="venv", venv=str(venv),
        condaEnv=None, dataDir=str(tmp_path / "data"), logMaxSize="4k", logMaxFiles=3,
    )
    data = yaml.safe_load(spec.read_text())
    data["hosts"][0].pop("condaEnv", None)
    spec.write_text(yaml.safe_dump(data))
    _, bundle = bundle_of(spec)
    start = next(a for a in bundle if a.path.endswith("serve-0/start.sh"))
    script = written(tmp_path / "start.sh", start.text)
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    unit_dir = next((tmp_path / "data").glob("*/*-serve-0"))
    deadline = time.monotonic() + 60  # a bounded wait for the writer to finish
    log = unit_dir / "log"
    while time.monotonic() < deadline and not (log.exists() and "line 1000 " in log.read_text()):
        time.sleep(0.2)
    logs = sorted(p.name for p in unit_dir.iterdir() if p.name.startswith("log"))
    assert logs == ["log", "log.1", "log.2"], logs
    assert all((unit_dir / n).stat().st_size <= 4096 + 64 for n in logs)
    assert "line 1000 " in (unit_dir / "log").read_text()


def test_observed_states_become_repairs() -> None:
    from pdctl.targets.state import (
        START_GRACE,
        Change,
        not_answering,
        overdue,
        parse_observed,
        supervision,
    )

    text = (
        f"a\th\trunning\t10\t-\tnohup\t{START_GRACE + 60}\n"
        "b\th\trunning\t11\t-\tnohup\t5\n"
        "c\th\tgone\t12\t-\tnohup\t-\n"
        "d\th\tfailed:start-limit-hit\t-\t5\tsystemd\t-\n"
    )
    a, b, c, d = parse_observed("h1", text)
    assert overdue(a) and not overdue(b) and not overdue(c)
    keep = Change("h1", "a", "serve", "keep", "unchanged, running")
    fixed = not_answering(keep, "no answer", a)
    assert fixed.action == "restart"
    assert fixed.why == "restart: not answering (no answer) after 16 min running"
    assert supervision(c).startswith(" (its server process is gone")
    assert supervision(d) == " (start limit hit)" and d.restarts == 5
