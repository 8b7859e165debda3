"""The CLI root: registers one command per module and owns the single error boundary."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer

from pdctl import __version__

# One module per command; each has `register(app)`. Command modules import heavy clients
# (paramiko, docker, kubernetes) only inside the command functions.
COMMAND_MODULES = (
    "pdctl.cli.init_cmd",
    "pdctl.cli.validate_cmd",
    "pdctl.cli.render_cmd",
    "pdctl.cli.schema_cmd",
    "pdctl.cli.explain_cmd",
    "pdctl.cli.plan_cmd",
    "pdctl.cli.preflight_cmd",
    "pdctl.cli.up_cmd",
    "pdctl.cli.diff_cmd",
    "pdctl.cli.down_cmd",
    "pdctl.cli.status_cmd",
    "pdctl.cli.logs_cmd",
    "pdctl.cli.top_cmd",
    "pdctl.cli.bench_cmd",
    "pdctl.cli.tune_cmd",
)

app = typer.Typer(
    name="pdctl",
    help="Deploy vLLM from one declarative spec: processes over SSH (phase 0), Kubernetes "
    "(phase 1), prefill/decode disaggregation (phase 2) and HAMi-sliced decode (phase 3).",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"pdctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
    debug: bool = typer.Option(
        False, "--debug", help="Show tracebacks on errors (before or after the command)."
    ),
) -> None:
    """pdctl: vLLM deployments from bare metal to Kubernetes."""
    from pdctl.cli import state

    state.DEBUG = state.DEBUG or debug


@app.command("version")
def version_cmd() -> None:
    """Print the pdctl version."""
    typer.echo(f"pdctl {__version__}")


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def command() -> Any:
    """The click command tree of the app, with pdctl's metavars (SPEC, DIR, INTEGER)."""
    from typer.main import get_command

    from pdctl.cli.metavars import polish

    return polish(get_command(app))


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
    import contextlib
    import io
    import os

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
    from pdctl.cli.way_out import exit_now as _exit
    from pdctl.cli.way_out import fail as _fail
    from pdctl.cli.way_out import output_error, output_failed
    from pdctl.errors import PdctlError

    if sys.stdout is None:  # started with `>&-`
        _fail("error: standard output is closed; redirect it to a file or /dev/null", 2)
    from pdctl.cli import state

    args, state.DEBUG = take_debug(sys.argv[1:])
    try:
        # standalone_mode=False returns a command's exit code (typer.Exit) instead of exiting.
        rc = command()(args, standalone_mode=False, prog_name="pdctl")
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
                _fail(
                    f"error: {_usage_line(exc, errors)}",
                    2 if isinstance(exc, errors.UsageError) else 1,
                )
        raise
    _exit(rc if isinstance(rc, int) else 0)
