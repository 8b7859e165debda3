"""Paths a command writes to, checked before any work where that can be done, with one line
that says what and how to fix it (exit 2): `--report FILE.html` of `bench` and `plan`, `init
-o FILE`, `render --output-dir DIR`. The report page itself is written at the end
(pdctl.report builds it)."""

from __future__ import annotations

from pathlib import Path

from pdctl.cli import term
from pdctl.errors import UsageError

UNWRITABLE_FIX = "give a path in a folder you can write to"


def check_output_path(option: str, path: Path, example: str) -> None:
    """Refuse an output file path that cannot be written before any work is done (a bench runs
    for minutes): a folder, or a file in a folder that does not exist."""
    if path.is_dir():
        raise UsageError(f"{option} {path}: is a directory",
                         fix=f"give a file name, e.g. {example}")
    if not path.parent.is_dir():
        raise UsageError(f"{option} {path}: no directory {path.parent}",
                         fix="create the directory first or give another path")


def check_report_path(path: Path) -> None:
    check_output_path("--report", path, "run.html")


def cannot_write(option: str, path: Path, exc: OSError) -> UsageError:
    """The usage error for an output path the system refused (permissions, /proc, a file
    where a folder should be)."""
    return UsageError(f"{option} {path}: cannot write it ({exc.strerror or exc})",
                      fix=UNWRITABLE_FIX)


def write_report(path: Path, html: str) -> None:
    try:
        path.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise cannot_write("--report", path, exc) from None

    term.console(stderr=True).print(f"report written to {path}", highlight=False)
