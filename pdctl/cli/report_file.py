"""`--report FILE.html` of `bench` and `plan`: the path checked before any work, the page
written at the end (pdctl.report builds it)."""

from __future__ import annotations

from pathlib import Path

from pdctl.cli import term
from pdctl.errors import UsageError


def check_report_path(path: Path) -> None:
    """Refuse a --report path that cannot be written before any work is done (a bench runs
    for minutes)."""
    if path.is_dir():
        raise UsageError(f"--report {path}: is a directory", fix="give a file name, e.g. run.html")
    if not path.parent.is_dir():
        raise UsageError(f"--report {path}: no directory {path.parent}",
                         fix="create the directory first or give another path")


def write_report(path: Path, html: str) -> None:
    try:
        path.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--report {path}: {exc.strerror}") from None

    term.console(stderr=True).print(f"report written to {path}", highlight=False)
