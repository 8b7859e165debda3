"""The GPU harness's Mooncake scenario logs the connector at DEBUG (drive.py): the document it
hands vLLM as VLLM_LOGGING_CONFIG_PATH must be one `logging.config.dictConfig` takes, put the
connector's module loggers at DEBUG and leave the rest of vLLM at INFO, all on stdout (the
unit's log that `pdctl logs` and the harness keep)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from pdctl.targets.crashline import VLLM_ERROR
from pdctl.targets.stages import PREFIX
from tests.gpu import drive
from tests.helpers import cli, written

MODULE = drive.CONNECTOR_LOGGER + ".mooncake_connector"  # vLLM's init_logger(__name__)
ROOT = Path(__file__).resolve().parents[2]
# In a child: dictConfig closes every handler of the process that runs it (pytest's too).
EMIT = f"""
import logging, logging.config
from tests.gpu import drive
logging.config.dictConfig(drive.connector_debug_logging())
logging.getLogger({MODULE!r}).debug("Sending kv transfer request for %s", {{"r1"}})
logging.getLogger("vllm.v1.core.sched.scheduler").debug("still in WAITING_FOR_REMOTE_KVS")
logging.getLogger("vllm.v1.core.sched.scheduler").info("scheduler line")
logging.getLogger("vllm.v1.engine.core").error("EngineCore failed")
"""


def test_connector_debug_reaches_stdout_and_the_scheduler_debug_does_not() -> None:
    run = subprocess.run([sys.executable, "-c", EMIT], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True)
    lines = run.stdout.splitlines()
    assert len(lines) == 3 and run.stderr == "", (lines, run.stderr)
    assert lines[0].startswith("DEBUG ") and "[<string>:5]" in lines[0]
    assert lines[0].endswith("Sending kv transfer request for {'r1'}")
    assert lines[1].startswith("INFO ") and lines[1].endswith("scheduler line")
    # the shape pdctl's log readers take: stages.PREFIX (INFO) and crashline.VLLM_ERROR
    assert PREFIX.match(lines[1]), lines[1]
    found = VLLM_ERROR.search("(EngineCore_DP0 pid=7) " + lines[2])
    assert found and found.group(1) == "EngineCore failed", lines[2]


def test_the_mooncake_spec_hands_it_to_both_engines_and_validates(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(drive, "DATA", tmp_path / "data")
    monkeypatch.setattr(drive, "MODELS", Path(drive.__file__).parent / "models")
    spec = drive.phase2_spec("mooncake")
    config = tmp_path / "data" / "vllm-logging.json"
    assert spec["engine"]["env"]["VLLM_LOGGING_CONFIG_PATH"] == str(config)
    assert json.loads(config.read_text()) == drive.connector_debug_logging()
    path = written(tmp_path / "spec.yaml", yaml.safe_dump(spec, sort_keys=False))
    _, err = cli(["render", str(path), "--output-dir", str(tmp_path / "r")])
    assert "vLLM 0.23.0's MooncakeConnector" in err  # the caution (validate/render warn)
    scripts = "".join(p.read_text() for p in (tmp_path / "r").rglob("*") if p.is_file())
    assert scripts.count(f"VLLM_LOGGING_CONFIG_PATH={config}") >= 2  # prefill and decode
    assert "VLLM_LOGGING_CONFIG_PATH" not in drive.phase2_spec("nixl")["engine"]["env"]


def test_engine_env_reaches_both_engines_beside_the_logging_path(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(drive, "DATA", tmp_path / "data")
    spec = drive.phase2_spec("mooncake", ["MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER=65536"])
    env = spec["engine"]["env"]
    assert env["MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER"] == "65536"
    assert "VLLM_LOGGING_CONFIG_PATH" in env and env["HF_HUB_OFFLINE"] == "1"
    assert "MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER" not in drive.ENGINE_ENV
