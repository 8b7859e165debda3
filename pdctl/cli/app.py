"""The CLI root: registers one command per module and owns the single error boundary."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
from typing import Any

import typer
from typer.main import get_command

from pdctl import __version__
from pdctl.cli import state
from pdctl.cli.metavars import polish
from pdctl.cli.way_out import exit_now as _exit
from pdctl.cli.way_out import fail as _fail
from pdctl.cli.way_out import output_error, output_failed
from pdctl.errors import PdctlError

# The module of each command, which defines it as a function of the command's name (or
# FUNCTIONS'). Command modules import heavy clients (paramiko, docker, kubernetes) only inside
# the command functions, and a run loads only the module of the command it runs
# (`command(args)`): `pdctl render` imports no other command's module.
COMMANDS = {
    "init": "pdctl.cli.init_cmd", "validate": "pdctl.cli.validate_cmd",
    "render": "pdctl.cli.render_cmd", "schema": "pdctl.cli.schema_cmd",
    "explain": "pdctl.cli.explain_cmd", "plan": "pdctl.cli.plan_cmd",
    "preflight": "pdctl.cli.preflight_cmd", "bundle": "pdctl.cli.bundle_cmd",
    "up": "pdctl.cli.up_cmd", "diff": "pdctl.cli.diff_cmd", "down": "pdctl.cli.down_cmd",
    "restart": "pdctl.cli.restart_cmd", "status": "pdctl.cli.status_cmd",
    "logs": "pdctl.cli.logs_cmd", "top": "pdctl.cli.top_cmd",
    "adapters": "pdctl.cli.adapters_cmd", "bench": "pdctl.cli.bench_cmd",
    "tune": "pdctl.cli.tune_cmd", "scale": "pdctl.cli.scale_cmd",
    "autoscale": "pdctl.cli.autoscale_cmd"}
FUNCTIONS = {"autoscale": "autoscale_cmd", "scale": "scale_cmd"}  # beside pdctl.scale's scale


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"pdctl {__version__}")
        raise typer.Exit()


def root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."),
    debug: bool = typer.Option(
        False, "--debug", help="Show tracebacks on errors (before or after the command)."),
) -> None:
    """pdctl: vLLM deployments from bare metal to Kubernetes."""
    state.DEBUG = state.DEBUG or debug


def version_cmd() -> None:
    """Print the pdctl version."""
    typer.echo(f"pdctl {__version__}")


def build(names: tuple[str, ...] | None = None) -> typer.Typer:
    """The typer app with the commands `names` (every command when None)."""
    made = typer.Typer(
        name="pdctl",
        help="Deploy vLLM from one declarative spec: processes over SSH (phase 0), Kubernetes "
        "(phase 1), prefill/decode disaggregation (phase 2) and HAMi-sliced decode (phase 3).",
        no_args_is_help=True,
        add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
        pretty_exceptions_enable=False, rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]})
    made.callback()(root)
    made.command("version")(version_cmd)
    for name in COMMANDS if names is None else names:
        module = importlib.import_module(COMMANDS[name])
        made.command(name)(getattr(module, FUNCTIONS.get(name, name)))
    return made


_FULL: list[typer.Typer] = []


def __getattr__(name: str) -> Any:
    """`app`: the typer app with every command (docs, tests), built at first use."""
    if name != "app":
        raise AttributeError(name)
    if not _FULL:
        _FULL.append(build())
    return _FULL[0]


def wanted(args: list[str] | None) -> tuple[str, ...] | None:
    """The one command a run needs: the first word of `args` when it names a command (the
    root's options take no values); None (every command) for help, completion or a typo."""
    if args is None or os.environ.get("_PDCTL_COMPLETE"):
        return None
    first = next((a for a in args if not a.startswith("-")), None)
    return (first,) if first in COMMANDS else None


def command(args: list[str] | None = None) -> Any:
    """The click command tree with pdctl's metavars (SPEC, DIR, INTEGER): of every command,
    or, given a run's arguments, of the command they name only."""
    names = wanted(args)
    return polish(get_command(__getattr__("app") if names is None else build(names)))


def take_debug(args: list[str]) -> tuple[list[str], bool]:
    """`--debug` anywhere before a `--`: the arguments without it, and whether it was there."""
    end = args.index("--") if "--" in args else len(args)
    kept = [a for a in args[:end] if a != "--debug"]
    return kept + args[end:], len(kept) != end


def _click_exception_modules() -> list:
    """click's exception modules: typer's vendored copy (typer >= 0.22) and/or click itself."""
    found = []
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(importlib.import_module(name))
        except ImportError:
            continue
    return found


def _usage_line(exc: Exception, errors: object) -> str:
    """One line for a click error: what is wrong, and where the help is."""
    message = " ".join(str(exc.format_message()).split()).rstrip(".")  # type: ignore[attr-defined]
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, errors.UsageError) and ctx is not None:  # type: ignore[attr-defined]
        return f"{message}; see `{ctx.command_path} --help`"
    return message


def root_help() -> str:
    """`pdctl --help` exactly as typer prints it at 80 columns (`pdctl.cli.entry` serves a
    stored copy of it without importing typer)."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            command()(["--help"], standalone_mode=False, prog_name="pdctl")
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return out.getvalue()


def main() -> None:
    """Entry point: run the app; PdctlError becomes one line on stderr and its exit code."""
    if sys.stdout is None:  # started with `>&-`
        _fail("error: standard output is closed; redirect it to a file or /dev/null", 2)

    args, state.DEBUG = take_debug(sys.argv[1:])
    try:
        # standalone_mode=False returns a command's exit code (typer.Exit) instead of exiting.
        rc = command(args)(args, standalone_mode=False, prog_name="pdctl")
        sys.stdout.flush()  # a full disk or a closed pipe shows here, not at interpreter exit
    except PdctlError as exc:
        if state.DEBUG:
            raise
        lines = exc.lines() if hasattr(exc, "lines") else [exc.line()]  # SpecErrors: several
        for extra in lines[:-1]:
            sys.stderr.write(f"error: {extra}\n")
        _fail(f"error: {lines[-1]}", exc.exit_code)
    except typer.Exit as exc:
        _exit(exc.exit_code)
    except typer.Abort:
        _fail("aborted", 130)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except OSError as exc:  # writing the output: stdout on a full disk, or a closed pipe
        if not output_error(exc):
            raise
        if state.DEBUG:
            raise
        output_failed(exc)
    except Exception as exc:  # click usage errors (typer >= 0.22 vendors click as typer._click)
        for errors in _click_exception_modules():
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `pdctl`: the help, not an error
                sys.stdout.write(root_help())
                _exit(0)
            exit_type = getattr(errors, "Exit", None)
            if exit_type is not None and isinstance(exc, exit_type):
                _exit(exc.exit_code)
            if isinstance(exc, errors.ClickException):
                _fail(f"error: {_usage_line(exc, errors)}",
                      2 if isinstance(exc, errors.UsageError) else 1)
        raise
    _exit(rc if isinstance(rc, int) else 0)
