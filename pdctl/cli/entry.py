"""The `pdctl` entry point: answers `pdctl`, `--help` and `--version` from stored text (no
typer, no pydantic), and hands every other command line to the typer app."""

from __future__ import annotations

import shutil
import sys


def main() -> None:
    args = sys.argv[1:]
    if args in ([], ["--help"]) and shutil.get_terminal_size((80, 24)).columns >= 80:
        from pdctl.cli.helptext import ROOT_HELP

        sys.stdout.write(ROOT_HELP)
        return
    if args in (["--version"], ["version"]):
        from pdctl import __version__

        sys.stdout.write(f"pdctl {__version__}\n")
        return
    from pdctl.cli.app import main as run_app

    run_app()
