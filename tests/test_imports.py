"""`pdctl --help`, `validate` and `render` must not import the heavy clients."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

HEAVY = ("paramiko", "docker", "kubernetes", "pynvml", "kubernetes_validate")

PROBE = """
import sys
sys.argv = ["pdctl", *{argv!r}]
from pdctl.cli.app import main
try:
    main()
except SystemExit:
    pass
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
sys.stderr.write("HEAVY=" + ",".join(heavy) + "\\n")
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["validate", "examples/phase1-k8s.yaml"],
        ["render", "examples/phase1-k8s.yaml"],
        ["render", "examples/phase0-multihost.yaml"],
        ["schema"],
        ["init", "--phase", "1"],
    ],
    ids=lambda a: " ".join(a),
)
def test_light_commands_do_not_import_heavy_clients(argv: list[str]) -> None:
    code = PROBE.format(argv=argv, heavy=set(HEAVY))
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    line = [x for x in result.stderr.splitlines() if x.startswith("HEAVY=")][-1]
    assert line == "HEAVY=", f"{argv} imported {line[6:]}"


def test_every_command_help_works() -> None:
    from typer.main import get_command

    from pdctl.cli.app import app

    group = get_command(app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        assert command.help, f"command {name} has no help text"
        result = subprocess.run(
            [sys.executable, "-m", "pdctl", name, "--help"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr
