"""Where a cold `pdctl render` of the phase 1 example spends its time, stage by stage.

Run as `python benchmarks/breakdown.py SPEC`: the stages follow the CLI's own path (the
app, typer parsing `render SPEC`, `read_spec`, plan, render), each timed with perf_counter;
prints one JSON object (seconds per stage). run.py starts it several times in fresh
processes and keeps each stage's minimum.
"""

from __future__ import annotations

import json
import sys
import time

START = time.perf_counter()


def main() -> None:
    spec_path = sys.argv[1]
    stages: dict[str, float] = {}
    last = START

    def lap(name: str) -> None:
        nonlocal last
        now = time.perf_counter()
        stages[name] = now - last
        last = now

    import typer

    lap("typer (CLI framework)")
    from pdctl.cli.app import app

    lap("pdctl CLI modules")
    import typer._adapters  # noqa: F401  (typer >= 0.2x coerces parameters with pydantic)

    lap("pydantic, imported by typer to parse parameters")
    group = typer.main.get_command(app)
    ctx = group.make_context("pdctl", ["render", spec_path])
    command = group.get_command(ctx, "render")  # type: ignore[attr-defined]
    command.make_context("render", [spec_path], parent=ctx)

    lap("typer parses the command line (a pydantic adapter per parameter)")
    import yaml  # noqa: F401

    lap("PyYAML")
    from pdctl.cli.specfile import read_spec
    from pdctl.plan import make_plan
    from pdctl.render import kube, render  # noqa: F401

    lap("pdctl spec, plan and render modules")
    spec, _ = read_spec(spec_path)
    lap("parse + validate the spec (builds the spec's validators)")
    read_spec(spec_path)
    lap("parse + validate the spec again (validators built)")
    out = render(make_plan(spec)).stream()
    lap("plan + render + stream")
    assert out
    print(json.dumps(stages))


if __name__ == "__main__":
    main()
