"""The `pdctl` entry point: answers `pdctl`, `--help`, `-h` and `--version` from stored text (no
typer, no pydantic), and hands every other command line to the typer app. How a command
ends (one line on stderr, an exit code) is pdctl.cli.way_out."""

from __future__ import annotations

import os
import shutil
import sys

from pdctl.cli.way_out import output_error, output_failed


def main() -> None:
    args = sys.argv[1:] if sys.stdout is not None else None  # `>&-`: the app reports it
    try:
        completing = "_PDCTL_COMPLETE" in os.environ  # the shell asks typer for completions
        plain_help = args in ([], ["--help"], ["-h"]) and not completing
        if plain_help and shutil.get_terminal_size((80, 24)).columns >= 80:
            from pdctl.cli.helptext import ROOT_HELP

            sys.stdout.write(ROOT_HELP)
            sys.stdout.flush()
            return
        if args in (["--version"], ["version"]):
            from pdctl import __version__

            sys.stdout.write(f"pdctl {__version__}\n")
            sys.stdout.flush()
            return
    except OSError as exc:
        if not output_error(exc):
            raise
        output_failed(exc)
    from pdctl.cli.app import main as run_app

    run_app()
