"""The failure line of a dead engine (pdctl/targets/crashline.py): the last run's most telling
line, not systemd's own lines, vLLM's "See root cause above" wrapper, pydantic's link or the
previous run's last line. tests/fixtures/vllm/failed/ holds real logs of vLLM's CPU build
(0.32.0) failing to start (README there)."""

from __future__ import annotations

from pathlib import Path

from pdctl.targets.crashline import MARKER, telling_line
from pdctl.targets.outcome import Outcome, UnitFailure, UpFailed

FAILED = Path(__file__).parents[1] / "fixtures" / "vllm" / "failed"


def test_a_pydantic_config_error_shows_its_detail_not_its_link():
    text = (FAILED / "cpu-0.32-max-model-len.log").read_text()
    assert text.rstrip().splitlines()[-1].lstrip().startswith("For further information visit")
    line = telling_line(text)
    assert line.startswith("pydantic_core._pydantic_core.ValidationError: 1 validation error "
                           "for ModelConfig: Value error, User-specified max_model_len (2048) "
                           "is greater than the derived max_model_len"), line


def test_systemd_lines_after_the_engine_are_skipped():
    text = (FAILED / "cpu-0.32-max-model-len.log").read_text() + (
        "pdctl-x-serve-0.service: Main process exited, code=exited, status=1/FAILURE\n"
        "pdctl-x-serve-0.service: Failed with result 'exit-code'.\n"
        "pdctl-x-serve-0.service: Consumed 12.345s CPU time.\n"
    )
    assert "User-specified max_model_len (2048)" in telling_line(text)


def test_the_previous_run_is_not_this_run():
    before = (FAILED / "cpu-0.32-max-model-len.log").read_text()
    assert telling_line(before + f"{MARKER} x-serve-0\n") == ""  # this run said nothing
    systemd = before + "Started pdctl-x-serve-0.service - pdctl x-serve-0.\nKilled\n"
    assert telling_line(systemd) == "Killed"


# vLLM's engine core failure as its logger prints it (EngineCore's "failed to start", each
# traceback line with its prefix, then the API server's wrapper exception last)
ENGINE_CORE = """\
(EngineCore pid=88) ERROR 12-05 17:40:01 [core.py:1033] EngineCore failed to start.
(EngineCore pid=88) ERROR 12-05 17:40:01 [core.py:1033] Traceback (most recent call last):
(EngineCore pid=88) ERROR 12-05 17:40:01 [core.py:1033]   File "vllm/v1/engine/core.py", line 1021, in run_engine_core
(EngineCore pid=88) ERROR 12-05 17:40:01 [core.py:1033]     engine_core = EngineCoreProc(*args, **kwargs)
(EngineCore pid=88) ERROR 12-05 17:40:01 [core.py:1033] ValueError: To serve at least one request with the models's max seq len (512), (0.01 GiB KV cache is needed, which is larger than the available KV cache memory (0.00 GiB).
(APIServer pid=12) Traceback (most recent call last):
(APIServer pid=12)   File "vllm/v1/engine/utils.py", line 1100, in wait_for_engine_startup
(APIServer pid=12) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""  # noqa: E501


def test_the_first_error_and_its_cause_not_the_wrapper():
    line = telling_line(ENGINE_CORE)
    assert line.startswith("EngineCore failed to start. ValueError: To serve at least one"), line
    assert "See root cause above" not in line


def test_up_failed_names_the_telling_line():
    failure = UnitFailure("box", "x-serve-0", "the process exited before it became healthy",
                          "INFO starting\n" + ENGINE_CORE)
    line = UpFailed(Outcome(failures=[failure])).line()
    assert "its log ends: EngineCore failed to start. ValueError: To serve" in line, line
