"""Where a cold `pdctl render` of the phase 1 example spends its time, stage by stage.

Run as `python benchmarks/breakdown.py SPEC`: imports happen in the order the CLI needs
them, each stage timed with perf_counter; prints one JSON object (seconds per stage).
run.py starts it several times in fresh processes and keeps each stage's minimum.
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

    import typer  # noqa: F401

    lap("typer (CLI framework)")
    import pdctl.cli.app  # noqa: F401

    lap("pdctl CLI modules")
    import pydantic  # noqa: F401
    import pydantic.main  # noqa: F401
    import pydantic.plugin._loader  # noqa: F401  (imports importlib.metadata)

    lap("pydantic (library import)")
    import yaml  # noqa: F401

    lap("PyYAML")
    from pdctl.spec import load_text

    lap("pdctl spec models (pydantic schema build)")
    import pdctl.render.kube  # noqa: F401
    from pdctl.plan import make_plan
    from pdctl.render import render

    lap("pdctl plan + render modules")
    with open(spec_path, encoding="utf-8") as f:
        text = f.read()
    spec, _ = load_text(text, spec_path)
    lap("parse + validate the spec")
    out = render(make_plan(spec)).stream()
    lap("plan + render + stream")
    assert out
    print(json.dumps(stages))


if __name__ == "__main__":
    main()
