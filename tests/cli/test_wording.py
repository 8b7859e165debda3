"""Small wording rules: stdin is `<stdin>` in every line (as in the spec's errors), every
warning of `validate -o json` is its stderr line (`file[:line]: warning: ...`), and each
command's `-p/--phase` help says what that command does at the phase."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli.test_cli_errors import GOOD
from tests.helpers import pdctl


def test_stdin_is_named_as_its_errors_name_it() -> None:
    ok = pdctl("validate", "-", input=GOOD)  # two replicas without a router: a warning too
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("<stdin>: ok: demo"), ok.stdout
    assert ok.stderr.startswith("<stdin>: warning: serve: clients get 2 endpoints"), ok.stderr
    bad = pdctl("validate", "-", input=GOOD.replace("replicas: 2", "replicas: 0"))
    assert bad.returncode == 2 and bad.stderr.startswith("error: <stdin>:10: "), bad.stderr
    doc = json.loads(pdctl("validate", "-", "-o", "json", input=GOOD).stdout)
    assert doc["spec"] == "<stdin>"


@pytest.mark.parametrize("spec", ["examples/phase3-hami.yaml",
                                  "examples/phase0-multihost.yaml"])
def test_json_warnings_are_their_stderr_lines(spec: str) -> None:
    run = pdctl("validate", spec, "-o", "json")
    assert run.returncode == 0, run.stderr
    warnings = json.loads(run.stdout)["warnings"]
    assert warnings, run.stdout  # the HAMi note; the endpoints hint
    for line in warnings:
        assert re.match(rf"{re.escape(spec)}(:\d+)?: warning: ", line), line
        assert line in run.stderr.splitlines(), (line, run.stderr)


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("render", "Render at this phase"), ("validate", "Check the spec at this phase"),
        ("up", "Bring the deployment up at this phase"),
        ("preflight", "Check the hosts for this phase"),
        ("status", "brought up at (`up -p`)"), ("logs", "brought up at (`up -p`)"),
        ("down", "brought up at (`up -p`)"), ("top", "brought up at (`up -p`)"),
    ],
)
def test_phase_help_fits_the_command(command: str, words: str) -> None:
    out = pdctl(command, "--help").stdout
    assert words in " ".join(out.split()), out
