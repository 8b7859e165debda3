"""`pdctl adapters load|unload|list SPEC`: LoRA adapters at run time (docs/lora.md)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from pdctl.cli import term
from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.options import (
    DEPLOYED_PHASE,
    SPEC,
    TARGET,
    check_output,
    check_phase_target,
    output_option,
)
from pdctl.cli.specfile import plan_from, with_overlays
from pdctl.errors import PdctlError, SpecError, UsageError
from pdctl.plan.lora import check_adapters_call
from pdctl.render import render
from pdctl.top.adapters import call_engines, listed_adapters, reason

if TYPE_CHECKING:
    from pdctl.plan.model import Plan
    from pdctl.top.adapters import Answer

ACTIONS = ("list", "load", "unload")


@with_overlays
@connection(docker=False)
def adapters(
    conn: ConnectFlags,
    action: str = typer.Argument(..., metavar="ACTION", help="list, load or unload."),
    spec: str = SPEC,
    name: str | None = typer.Argument(
        None, metavar="NAME", help="load/unload: the adapter's name (a request's `model`)."),
    path: str | None = typer.Argument(
        None, metavar="PATH",
        help="load: the adapter's folder on the engines' hosts, or a Hugging Face id."),
    phase: int | None = DEPLOYED_PHASE, target: str | None = TARGET,
    output: str = output_option(),
) -> None:
    """List, load or unload LoRA adapters on every engine of SPEC (prefill and decode
    alike) through vLLM's /v1/models, /v1/load_lora_adapter and /v1/unload_lora_adapter.
    load and unload need `model.lora.runtimeLoading` (and so `secrets.apiKey`)."""
    if action not in ACTIONS:
        raise UsageError(f"ACTION must be list, load or unload (got {action!r})")
    check_output(output)
    need = {"list": 0, "load": 2, "unload": 1}[action]
    given = [v for v in (name, path) if v is not None]
    if len(given) != need:
        usage = {"list": "", "load": " NAME PATH", "unload": " NAME"}[action]
        raise UsageError(f"usage: pdctl adapters {action} SPEC{usage}")
    check_phase_target(phase, target)
    plan, source = plan_from(spec, phase, target)
    try:
        check_adapters_call(plan, action, name)
        bundle = render(plan)
    except SpecError as exc:
        raise source.locate(exc) from None
    key = _api_key(plan)

    body = {"lora_name": str(name)} | ({"lora_path": str(path)} if path else {})
    call: tuple[str, str, dict[str, str] | None] = ("POST", f"/v1/{action}_lora_adapter", body)
    call = ("GET", "/v1/models", None) if action == "list" else call
    answers, gone = call_engines(plan, bundle, conn.ssh(), conn.parallel, *call, api_key=key)
    _show(plan, action, answers, output)
    failed = [a for a in answers if not a.ok]
    if failed or gone:
        whys = [f"{a.engine}: {_why(a)}" for a in failed] + list(gone.values())
        raise PdctlError(f"adapters {action} failed on " + "; ".join(whys))


def _api_key(plan: Plan) -> str | None:
    """The API key from the local variable `secrets.apiKey.env` (as `pdctl up` reads it)."""
    ref = plan.spec.secrets.api_key
    if ref is None:
        return None
    value = os.environ.get(ref.env)
    if not value:
        raise UsageError(f"${ref.env} is not set: the engines require the API key (secrets.apiKey)",
                         fix=f"export {ref.env} as for `pdctl up`")
    return value


def _why(a: Answer) -> str:
    return a.text if a.status == 0 else f"{a.status} {reason(a.text)}"


def _show(plan: Plan, action: str, answers: list[Answer], output: str) -> None:
    served = plan.served_name
    rows = []
    for a in answers:
        row: dict[str, Any] = {"engine": a.engine, "role": a.role, "host": a.host,
                               "status": a.status}
        if action == "list" and a.ok:
            row["adapters"] = listed_adapters(a.text, served)
        else:
            row["result"] = "ok" if a.ok else _why(a)
        rows.append(row)
    if output == "json":
        typer.echo(json.dumps({"name": plan.name, "action": action, "engines": rows}, indent=2))
        return
    table = Table(title=f"{plan.name}: adapters {action}")
    for col in ("engine", "role", "host", "adapters" if action == "list" else "result"):
        table.add_column(col)
    for row in rows:
        last = ", ".join(row["adapters"]) if "adapters" in row else str(row.get("result", ""))
        table.add_row(row["engine"], row["role"], row["host"], last or "-")
    term.console().print(table)
