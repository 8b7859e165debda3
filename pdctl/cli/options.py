"""Options shared by several commands."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import Any

import typer

from pdctl.errors import UsageError

SPEC = typer.Argument(..., help="Spec file, or - for stdin.")


def phase_option(help: str) -> Any:
    """`-p/--phase N`, with help that says what the command does at that phase."""
    return typer.Option(None, "--phase", "-p", help=help)


PHASE = phase_option("Render at this phase instead of the spec's.")
# Commands that act on what `up` started: the phase it started, when not the spec's.
DEPLOYED_PHASE = phase_option(
    "The phase the deployment was brought up at (`up -p`), if not the spec's.")
TARGET = typer.Option(None, "--target", metavar="TARGET",
                      help="hosts or kubernetes (phases 2 and 3; default from the spec).")

# `--facts DIR`, declared once for every command that takes it (render, up, status, plan),
# read by one loader (pdctl.inputs.read_facts) that refuses a recording of other machines.
FACTS = typer.Option(
    None, "--facts", metavar="DIR",
    help="A preflight recording of the spec's hosts (pdctl preflight --record DIR): render, "
    "up, status and diff pick each instance's GPUs by its topology (give status the DIR up had); "
    "plan counts the memory other processes already hold on the GPUs.")

DEPLOYED_BUNDLE = typer.Option(
    None, "--bundle", metavar="DIR",
    help="The deployment was started with `up --bundle DIR`: hold the hosts against the "
    "scripts rendered to install from DIR (its manifest is read; no file is hashed).")

STRICT = typer.Option(
    False, "--strict",
    help="Refuse (exit 1) a spec with a role that does not fit on "
    "its GPU (hardware.gpu), or a setting that may not work where it runs "
    "(RDMA-only transports on hosts without rdmaDevices, a group led from a host "
    "name, Mooncake on a vLLM before 0.30.0), instead of warning.")


def output_option(help: str = "table or json.", default: str = "table") -> Any:
    """`--output/-o FORMAT`, declared once; `check_output` refuses a format not offered."""
    return typer.Option(default, "--output", "-o", metavar="FORMAT", help=help)


def check_output(output: str, *formats: str) -> None:
    formats = formats or ("table", "json")
    if output not in formats:
        names = ", ".join(formats[:-1]) + " or " + formats[-1]
        raise UsageError(f"--output must be {names} (got {output!r})")


def check_phase_target(phase: int | None, target: str | None) -> None:
    if phase is not None and phase not in (0, 1, 2, 3):
        raise UsageError(f"--phase must be 0, 1, 2 or 3 (got {phase})")
    if target is not None and target not in ("hosts", "kubernetes"):
        raise UsageError(f"--target must be hosts or kubernetes (got {target!r})")


def with_params(
    fn: Callable[..., Any], run: Callable[..., Any], extra: list[inspect.Parameter], drop: str = ""
) -> Callable[..., Any]:
    """`run` (a wrapper that calls `fn`) named and documented as `fn`, with `fn`'s parameters
    (less `drop`) and `extra` as its signature, which typer reads (`fn`'s annotations evaluated
    in `fn`'s module)."""
    sig = inspect.signature(fn, eval_str=True)
    params = [p for p in sig.parameters.values() if p.name != drop] + extra
    functools.update_wrapper(run, fn)
    run.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    del run.__wrapped__  # type: ignore[attr-defined]  # typer reads the signature above
    return run


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$")


def seconds_of(text: str, option: str, most: float = 3600) -> float:
    """`60s`, `2m`, `1h` or a plain number of seconds, from 1 s to `most`; a usage error
    otherwise (`top --window`, `autoscale --window/--interval`)."""
    m = _DURATION.match(text)
    value = float(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2) or "s"] if m else 0.0
    if not m or not 1 <= value <= most:
        top = f"{most / 3600:g}h" if most >= 3600 else f"{most:g}s"
        raise UsageError(
            f"{option}: expected a duration from 1s to {top} such as 60s or 2m (got {text!r})")
    return value
