"""One error family. The CLI turns each into one line on stderr and an exit code."""

from __future__ import annotations

import re

# Control characters, and the ones that reorder or break a line on a terminal (bidi marks,
# embeddings, overrides and isolates; line and paragraph separators).
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
MAX_MESSAGE = 400  # characters of a message an error line quotes in full


def one_line(text: str) -> str:
    """Escape control characters (a newline in a YAML key, say) so an error stays one line
    and reads as it is."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


_LONG_WORD = re.compile(r"\S{81,}")


def shorten(text: str, limit: int = MAX_MESSAGE) -> str:
    """An overlong message made short: a long unbroken run (a 4,000-character value it quotes)
    keeps its head and tail, and so does a message still past the limit."""
    if len(text) <= limit:
        return text
    text = _LONG_WORD.sub(lambda m: f"{m.group()[:60]}...{m.group()[-12:]}", text)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 60]} ... {text[-50:]}"


class PdctlError(Exception):
    """Base of every error pdctl reports to a user (exit code 1 unless a subclass says else)."""

    exit_code = 1

    def line(self) -> str:
        return one_line(shorten(str(self)))


class SpecError(PdctlError):
    """The spec (or a command-line value) is wrong: where, what, and how to fix it. Exit 2."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        path: str = "",
        file: str = "",
        line: int | None = None,
        fix: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.file = file
        self.line_no = line
        self.fix = fix

    def located(self, file: str, line: int | None) -> SpecError:
        """A copy that names the file and line (keeps a line already known)."""
        return SpecError(
            self.message, path=self.path, file=file,
            line=self.line_no if self.line_no is not None else line, fix=self.fix,
        )

    def line(self) -> str:
        where = self.file
        if where and self.line_no is not None:
            where = f"{where}:{self.line_no}"
        text = f"{where}: " if where else ""
        if self.path:
            text += f"{shorten(self.path, 200)}: "
        text += shorten(self.message)
        if self.fix:
            text += f"; {shorten(self.fix)}"
        return one_line(text)

    def __str__(self) -> str:
        return self.line()


class UsageError(SpecError):
    """A bad command-line value (exit 2)."""
