"""Reading a spec from a path or stdin: the CLI's one door to spec files."""

from __future__ import annotations

import sys
from pathlib import Path

from pdctl.errors import SpecError
from pdctl.plan import Plan, make_plan
from pdctl.spec import Source, Spec, load_text


def read_spec(path: str) -> tuple[Spec, Source]:
    """Load SPEC (a file, or '-' for stdin). Every failure is one located SpecError."""
    if path == "-":
        try:
            stream = getattr(sys.stdin, "buffer", None)  # a text-only stdin (tests) has none
            text = stream.read().decode("utf-8") if stream is not None else sys.stdin.read()
        except UnicodeDecodeError:
            raise SpecError("is not UTF-8 text", file="<stdin>") from None
        return load_text(text, "<stdin>")
    p = Path(path)
    if not p.exists():
        raise SpecError(
            "no such file", file=path, fix="check the path, or create one with `pdctl init`"
        )
    if p.is_dir():
        raise SpecError("is a directory, not a spec file", file=path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError("is not UTF-8 text", file=path) from None
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror}", file=path) from None
    return load_text(text, path)


def plan_from(
    path: str, phase: int | None = None, target: str | None = None, **kwargs
) -> tuple[Plan, Source]:
    """Load SPEC and plan it; plan errors are located in the spec file."""
    spec, source = read_spec(path)
    return plan_spec(spec, source, phase, target, **kwargs), source


def plan_spec(
    spec: Spec, source: Source, phase: int | None = None, target: str | None = None, **kwargs
) -> Plan:
    """Plan a spec already read (SPEC `-` can be read only once); errors located in it."""
    try:
        return make_plan(spec, phase=phase, target=target, **kwargs)
    except SpecError as exc:
        raise source.locate(exc) from None
