"""How many of pdctl's own modules `pdctl up --dry-run --offline` of a phase 0 spec loads
(issue 27: fewer than 59).

`python benchmarks/up_modules.py [SPEC ...]` (default: every examples/phase0-*.yaml). Each
spec runs in a fresh process, through the CLI's entry point as the `pdctl` script runs it;
the count is the modules named `pdctl` or `pdctl.*` in sys.modules when the command returns
(packages count as modules; nothing else of Python's or of the dependencies is counted).
Prints one line per spec (count, spec) and, with --list, the modules themselves.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = """
import sys
from pdctl.cli.entry import main
sys.argv = ["pdctl", "up", {spec!r}, "--dry-run", "--offline"]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
mods = sorted(m for m in sys.modules if m == "pdctl" or m.startswith("pdctl."))
sys.stderr.write("PDCTL-MODULES " + str(code) + " " + " ".join(mods) + "\\n")
"""


def count(spec: str) -> tuple[int, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(spec=spec)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    line = [x for x in proc.stderr.splitlines() if x.startswith("PDCTL-MODULES ")][-1]
    _, code, *mods = line.split()
    if code not in ("0", "None"):
        raise SystemExit(f"pdctl up --dry-run --offline {spec} exited {code}: {proc.stderr}")
    return len(mods), mods


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*")
    parser.add_argument("--list", action="store_true", help="print the modules too")
    args = parser.parse_args()
    found = ROOT.glob("examples/phase0-*.yaml")
    specs = args.specs or sorted(str(p.relative_to(ROOT)) for p in found)
    for spec in specs:
        n, mods = count(spec)
        print(f"{n:4}  {spec}")
        if args.list:
            print("      " + "\n      ".join(mods))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
