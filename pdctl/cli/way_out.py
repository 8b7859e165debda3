"""The way out of every command: one line on stderr, and an exit code, even when stdout or
stderr fails (used by the entry point and the typer app alike)."""

from __future__ import annotations

import errno
import sys
from typing import NoReturn

# errno of a failed write to stdout: a full disk or quota, a closed pipe or descriptor.
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EPIPE, errno.EBADF, errno.EIO}


def output_error(exc: OSError) -> bool:
    """Whether exc is a failed write to stdout (a file pdctl writes names itself in it)."""
    return exc.filename is None and exc.errno in _OUTPUT_ERRNOS


def output_failed(exc: OSError) -> NoReturn:
    drop_stdout()
    if isinstance(exc, BrokenPipeError):  # `pdctl render | head`: the reader has all it wants
        sys.exit(1)
    fail(f"error: cannot write to standard output: {exc.strerror or exc}", 1)


def fail(line: str, code: int) -> NoReturn:
    """One line on stderr (when stderr can take it) and exit with code."""
    from pdctl.errors import one_line

    try:
        sys.stderr.write(one_line(line) + "\n")
        sys.stderr.flush()
    except (OSError, AttributeError, ValueError):  # stderr closed or full: the code still tells
        pass
    exit_now(code)


def exit_now(code: int) -> NoReturn:
    """Exit; output still buffered for a stdout that fails is dropped, so the interpreter
    does not report it again (with a traceback) at exit."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except (OSError, ValueError):
        drop_stdout()
    sys.exit(code)


def drop_stdout() -> None:
    """Point fd 1 at /dev/null (the buffered text that failed is never written)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
