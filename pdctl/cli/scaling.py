"""What `pdctl scale` and `pdctl autoscale` share: the spec planned at given role counts, and
their options (the secrets a started engine needs: pdctl.cli.secret_values)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from pdctl import inputs

if TYPE_CHECKING:
    from rich.console import Console

    from pdctl.plan.model import Plan
    from pdctl.preflight.facts import Facts
    from pdctl.render.bundle import Bundle
    from pdctl.scale import Load
    from pdctl.targets.base import Connect

NEW_TIMEOUT = typer.Option(
    900, "--timeout", min=1, help="Seconds a new instance may take to become healthy.")
DRAIN_TIMEOUT = typer.Option(
    120, "--drain-timeout", min=0,
    help="Seconds to wait for an instance's requests in flight before stopping it.")
BUNDLE = typer.Option(
    None, "--bundle", metavar="DIR",
    help="The deployment was started with `up --bundle DIR`: new instances install from DIR "
    "too (checked first, as `up --bundle` checks it; a host that lacks its files gets them "
    "over SSH before they start).")


def scaled_loader(texts: list[tuple[str, str]], phase: int | None, target: str | None,
                  facts: Facts | None, where: str) -> Load:
    """The spec planned and rendered with roles' replicas set (none set: the spec as written);
    `where` names the overlay in errors (e.g. `serve=5:1: serve.replicas: ...`)."""

    def load(counts: dict[str, int]) -> tuple[Plan, Bundle]:
        extra = [(f"{r}: {{replicas: {n}}}\n", where) for r, n in sorted(counts.items())]
        parsed, source = inputs.read_spec(texts + extra)
        plan = inputs.plan_spec(parsed, source, phase, target, facts=facts, scaled=bool(counts))
        return plan, inputs.render_plan(plan, source)

    return load


def with_bundle(load: Load, deployed: Plan, wheels: Path | None, options: Connect,
                console: Console) -> tuple[Load, Callable[[Plan, set[str]], None] | None]:
    """`--bundle DIR`: `load` rendered to install from DIR (checked once against `deployed`,
    before anything connects) and what copies DIR's files to the hosts where instances start;
    none given: `load` as it is, nothing to copy."""
    if wheels is None:
        return load, None
    from pdctl.offline.ship import scaled_from

    return scaled_from(load, deployed, wheels, options.ssh, options.parallel,
                       lambda line: console.print(line, highlight=False, markup=False))
