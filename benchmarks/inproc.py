"""Warm, in-process cost of load + plan + render + stream for one spec (imports excluded).

Run as `python benchmarks/inproc.py SPEC [REPEATS]`; prints one JSON object: the best time
of each stage in seconds, the artifact count and the output size. run.py calls it in a
child process so that the benchmark driver itself never imports pdctl.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def best_of(repeats: int, fn) -> tuple[float, object]:
    best = float("inf")
    result = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    from pdctl.plan import make_plan
    from pdctl.render import render
    from pdctl.spec import load_text

    path = sys.argv[1]
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    text = Path(path).read_text(encoding="utf-8")
    # One untimed pass loads templates and lazily imported modules.
    spec, _ = load_text(text, path)
    render(make_plan(spec)).stream()
    t_load, (spec, _) = best_of(repeats, lambda: load_text(text, path))
    t_plan, plan = best_of(repeats, lambda: make_plan(spec))
    t_render, bundle = best_of(repeats, lambda: render(plan))
    t_stream, out = best_of(repeats, lambda: bundle.stream())
    print(
        json.dumps(
            {
                "load": t_load,
                "plan": t_plan,
                "render": t_render,
                "stream": t_stream,
                "total": t_load + t_plan + t_render + t_stream,
                "instances": len(plan.instances),
                "artifacts": len(bundle.artifacts),
                "bytes": len(out.encode()),
            }
        )
    )


if __name__ == "__main__":
    main()
