"""The entry point answers `pdctl`, `--help` and `--version` without typer, with the same text."""

from __future__ import annotations

import os
import subprocess
import sys

from pdctl.cli.app import root_help
from pdctl.cli.helptext import ROOT_HELP
from tests.conftest import ROOT


def test_stored_help_is_what_typer_prints() -> None:
    assert ROOT_HELP == root_help(), "stale help text: run `python -m pdctl.cli.helptext`"


def run(*args: str, columns: str = "100") -> subprocess.CompletedProcess[str]:
    code = (
        "import sys; sys.argv = ['pdctl', *sys.argv[1:]]\n"
        "from pdctl.cli.entry import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    raise\n"
        "finally:\n"
        "    sys.stderr.write('TYPER=%s' % ('typer' in sys.modules))\n"
    )
    env = {**os.environ, "COLUMNS": columns}
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, env=env
    )


def test_bare_and_help_print_the_help_without_typer() -> None:
    for args in ((), ("--help",)):
        result = run(*args)
        assert result.returncode == 0
        assert result.stdout == ROOT_HELP
        assert result.stderr.endswith("TYPER=False")


def test_version_without_typer() -> None:
    from pdctl import __version__

    for args in (("--version",), ("version",)):
        result = run(*args)
        assert result.returncode == 0
        assert result.stdout == f"pdctl {__version__}\n"
        assert result.stderr.endswith("TYPER=False")


def test_narrow_terminal_gets_typer_wrapping() -> None:
    result = run("--help", columns="60")
    assert result.returncode == 0
    assert result.stderr.endswith("TYPER=True")
    assert max(len(line) for line in result.stdout.splitlines()) <= 60


def test_other_commands_go_to_typer() -> None:
    result = run("validate", "examples/phase1-k8s.yaml")
    assert result.returncode == 0, result.stderr
    assert "ok:" in result.stdout
