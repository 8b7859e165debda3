"""Reading a spec from a path or stdin: the CLI's one door to spec files. The texts go to
pdctl.inputs, which makes the plan's inputs (spec, overlays, model, `--facts`) and the plan."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from pdctl import inputs
from pdctl.cli.options import check_phase_target, with_params
from pdctl.errors import SpecError, UsageError, one_line
from pdctl.inputs import capacity_warnings
from pdctl.spec.source import MAX_SPEC_BYTES, Source

if TYPE_CHECKING:  # the plan and the models load when a spec is read, not at start-up
    from pdctl.plan import Plan
    from pdctl.render.bundle import Bundle
    from pdctl.spec import Spec


# The `--overlay` files of the running command (set by `with_overlays`, read by read_spec).
OVERLAYS: ContextVar[tuple[str, ...]] = ContextVar("pdctl_overlays", default=())


def with_overlays(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command `--overlay FILE` (repeatable): every spec the command reads through
    read_spec is its SPEC deep-merged with these files, in order (docs/spec.md, Overlays)."""
    option = typer.Option(
        None, "--overlay", metavar="FILE",
        help="Deep-merge FILE over SPEC (repeatable; later files win): mappings merge, lists "
        "replace, hosts merge by name. See docs/spec.md, Overlays.")
    extra = inspect.Parameter(
        "overlay", inspect.Parameter.KEYWORD_ONLY, default=option, annotation=list[str] | None)

    def run(*args: Any, overlay: list[str] | None = None, **kwargs: Any) -> Any:
        token = OVERLAYS.set(tuple(overlay or ()))
        try:
            return command(*args, **kwargs)
        finally:
            OVERLAYS.reset(token)

    return with_params(command, run, [extra])


def read_spec(path: str) -> tuple[Spec, Source]:
    """Load SPEC (a file, or '-' for stdin) merged with the command's `--overlay` files.
    Every failure is one located SpecError (SpecErrors for several problems)."""
    return inputs.read_spec(spec_texts(path))


def spec_texts(path: str) -> list[tuple[str, str]]:
    """(text, file name) of SPEC and of the command's `--overlay` files, for inputs.read_spec."""
    overlays = OVERLAYS.get()
    if path == "-" and "-" in overlays:
        raise UsageError("SPEC and an --overlay cannot both be - (stdin)", fix="give a file")
    return [(_read_text(p), shown(p)) for p in (path, *overlays)]


def shown(path: str) -> str:
    """SPEC as messages name it: `<stdin>` for -, as the spec's error lines do."""
    return "<stdin>" if path == "-" else path


def _read_text(path: str) -> str:
    if path == "-":
        return _read_stdin()
    p = Path(path)
    if not p.exists():
        raise SpecError(
            "no such file", file=path, fix="check the path, or create one with `pdctl init`")
    if p.is_dir():
        raise SpecError("is a directory, not a spec file", file=path)
    return inputs.read_bounded(p, MAX_SPEC_BYTES, path)


def _read_stdin() -> str:
    stream = sys.stdin
    if stream is None:
        raise SpecError(
            "standard input is closed", file="<stdin>", fix="pipe the spec in, or give its path")
    raw = getattr(stream, "buffer", None)  # a text-only stdin (tests) has none
    try:
        data = raw.read(MAX_SPEC_BYTES + 1) if raw is not None else stream.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror or exc}", file="<stdin>") from None
    return inputs.text_of(data, MAX_SPEC_BYTES, "<stdin>")


def plan_from(
    path: str, phase: int | None = None, target: str | None = None, facts: Path | None = None
) -> tuple[Plan, Source]:
    """Read SPEC (once: `-` cannot be read twice) and plan it, with the recording `--facts DIR`
    when given; errors located in the spec."""
    spec, source = read_spec(path)
    found = inputs.read_facts(facts, spec) if facts is not None else None
    return inputs.plan_spec(spec, source, phase, target, facts=found), source


def load(
    spec: str, phase: int | None, target: str | None, facts: Path | None = None,
    wheels: Path | None = None,
) -> tuple[Plan, Bundle]:
    """Plan and render SPEC exactly as `pdctl render` does (up, down, status, logs); with
    `wheels`, as `up --bundle` rendered it (status, diff, restart)."""
    check_phase_target(phase, target)
    plan, source = plan_from(spec, phase, target, facts)
    if wheels is not None:
        from pdctl.offline.ship import installed_from

        plan = installed_from(plan, wheels)
    return plan, inputs.render_plan(plan, source)


def caution_lines(plan: Plan, source: Source) -> list[str]:
    """The plan's located warnings (`file:line: warning: path: what; fix`): settings that may
    not work where they run (plan/transport.py); `--strict` refuses them."""
    out = []
    for c in plan.cautions:
        located = source.locate(SpecError(c.message, path=c.path, fix=c.fix))
        where = located.file
        if located.line_no is not None:
            where = f"{where}:{located.line_no}"
        out.append(one_line(f"{where}: warning: {c.path}: {c.message}; {c.fix}"))
    return out


def note_lines(spec_file: str, plan: Plan) -> list[str]:
    """The plan's notes as warning lines, `file: warning: what` (as capacity warnings)."""
    return [f"{shown(spec_file)}: warning: {note}" for note in plan.notes]


def warn(spec_file: str, plan: Plan, strict: bool, source: Source) -> tuple[list[str], list[str]]:
    """The plan's notes, located cautions and capacity warnings on stderr (render, validate);
    `--strict` refuses (exit 1) a role that does not fit, or a caution, before anything is
    written. Returns (cautions, capacity warnings) as printed."""
    spec_file = shown(spec_file)
    for line in note_lines(spec_file, plan):
        typer.echo(line, err=True)
    cautions = caution_lines(plan, source)
    warnings = capacity_warnings(plan.spec, spec_file)
    for line in cautions + warnings:
        typer.echo(line, err=True)
    if strict and (cautions or warnings):
        what = []
        if warnings:
            what.append("a role does not fit on its GPU, or pdctl could not check the model or GPU")
        if cautions:
            what.append("a setting may not work where it runs")
        typer.echo(f"{spec_file}: refused (--strict): {' and '.join(what)}", err=True)
        raise typer.Exit(1)
    return cautions, warnings
