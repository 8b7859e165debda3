"""Cold `pdctl render examples/phase1-k8s.yaml` against the CLI framework's own floor,
`python -c "import typer._adapters, yaml"` (which pdctl cannot go below): issue 27 wants the
ratio of medians at most 1.5.

`python benchmarks/cold_render.py [--rounds N] [--spec FILE]`. Each run is a fresh process
with bytecode caches present and written as a user has them (no PYTHONDONTWRITEBYTECODE);
the two commands are interleaved round by round (timing.interleaved) so that a noisy machine
slows both alike. Prints the medians, their spread and the ratio; exits 1 above --limit.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import timing

ROOT = Path(__file__).resolve().parent.parent
# What the installed `pdctl` script runs (pip's console-script wrapper), without a shell shim.
PDCTL = "import sys; from pdctl.cli.entry import main; sys.exit(main())"
FLOOR = "import typer._adapters, yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--spec", default="examples/phase1-k8s.yaml")
    parser.add_argument("--limit", type=float, default=1.5)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    os.chdir(ROOT)
    stats = timing.interleaved(
        {
            "pdctl render": [sys.executable, "-c", PDCTL, "render", args.spec],
            "floor": [sys.executable, "-c", FLOOR],
        },
        rounds=args.rounds,
        env=env,
    )
    render, floor = stats["pdctl render"], stats["floor"]
    ratio = render.median / floor.median
    for label, s in stats.items():
        print(f"{label:14} median {timing.ms(s.median):>7}  IQR {timing.ms(s.spread)}")
    print(f"ratio {ratio:.2f} (limit {args.limit})")
    return 0 if ratio <= args.limit else 1


if __name__ == "__main__":
    raise SystemExit(main())
