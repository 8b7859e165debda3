"""Bad input -> ONE line on stderr (file:line: field: what; fix) and exit 2, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pdctl.cli.app import main
from tests.helpers import cli, data, run_cli, written

TABLE = data("cli_errors.yaml")  # the bad specs: each case's text, where and phrase
GOOD = TABLE["good"]


def text_of(case: dict) -> str:
    if "text" in case:
        return case["text"]
    if "replace" in case:
        return GOOD.replace(*case["replace"])
    return GOOD.split(case["before"])[0] if "before" in case else GOOD + case["add"]


CASES = [(c["id"], text_of(c), c["where"], c["phrase"]) for c in TABLE["cases"]]


run = run_cli


@pytest.mark.parametrize(("case", "text", "where", "phrase"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("command", ["validate", "render"])
def test_bad_spec_is_one_line_exit_2(
    case: str, text: str, where: str, phrase: str, command: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = written(tmp_path / "spec.yaml", text)
    out, err = cli([command, str(spec)], 2)
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {spec}{where}"), lines[0]
    assert phrase in lines[0]
    assert "Traceback" not in err


def test_at_least_25_malformed_cases() -> None:
    assert len(CASES) >= 25


def test_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    _, err = cli(["validate", "/nonexistent/spec.yaml"], 2)
    assert err.strip() == (
        "error: /nonexistent/spec.yaml: no such file; check the path, or create one with "
        "`pdctl init`"
    )


def test_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["validate", str(tmp_path)], capsys)
    assert code == 2 and "is a directory" in err


def test_bad_phase_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = written(tmp_path / "s.yaml", GOOD)
    code, _, err = run(["render", str(spec), "--phase", "9"], capsys)
    assert code == 2 and err.strip() == "error: --phase must be 0, 1, 2 or 3 (got 9)"


def test_debug_shows_the_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = written(tmp_path / "s.yaml", "name: d\n")
    with pytest.raises(Exception) as info:
        old = sys.argv
        sys.argv = ["pdctl", "--debug", "validate", str(spec)]
        try:
            main()
        finally:
            sys.argv = old
    assert "model" in str(info.value)


def test_render_output_dir_is_not_half_written(tmp_path, capsys) -> None:
    spec = written(tmp_path / "s.yaml", GOOD.replace("replicas: 2", "replicas: 9"))
    out = tmp_path / "out"
    _, _ = cli(["render", str(spec), "--output-dir", str(out)], 2)
    assert not out.exists()
