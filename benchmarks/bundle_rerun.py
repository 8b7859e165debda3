"""`pdctl bundle --weights` of a large model folder: the first run, a second run over the
unchanged folder (sha256 taken from DIR/.pdctl-hashes.json), and a second run with that record
deleted (every file of the source and the bundle read again, as before the record existed).

    python benchmarks/bundle_rerun.py [--mib 4096] [--rounds 3]

The snapshot is MiB of random bytes in two safetensors files plus a config.json, in a
temporary folder on the same disk as the bundle. Reads may come from the page cache (the
machine's memory permitting), which is the case the record helps least: from disk the
difference is larger. Prints the median seconds of each kind of run and what each said.
It runs `python -m pdctl` with the Python it runs on: run it with another installation's Python,
from outside the repository, to measure that version (one from before the record existed has
no record to delete).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC = Path(__file__).resolve().parent.parent / "examples" / "cpu-quickstart.yaml"


def snapshot(where: Path, mib: int) -> None:
    where.mkdir(parents=True)
    (where / "config.json").write_text('{"model_type": "llama"}')
    half = mib // 2
    for i in range(2):
        with (where / f"model-{i:05d}-of-00002.safetensors").open("wb") as fh:
            for _ in range(half):
                fh.write(os.urandom(1 << 20))
    old = time.time_ns() - 3600 * 10**9  # as a downloaded snapshot: not changed just now
    for path in where.iterdir():
        os.utime(path, ns=(old, old))


def bundle(out: Path, snap: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pdctl", "bundle", str(SPEC), "-o", str(out),
                           "--weights", str(snap)], capture_output=True, text=True, check=True)
    line = next((ln for ln in done.stderr.splitlines() if "weights from" in ln), "")
    return time.perf_counter() - t0, line.split(": ", 1)[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"first": [], "again": [], "again, no record": []}
    said: dict[str, str] = {}
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        snap = Path(tmp) / "snap"
        snapshot(snap, args.mib)
        for r in range(args.rounds):
            out = Path(tmp) / f"bundle{r}"
            for kind in times:
                if kind == "again, no record":
                    (out / ".pdctl-hashes.json").unlink(missing_ok=True)  # none before the record
                took, said[kind] = bundle(out, snap)
                times[kind].append(took)
            subprocess.run(["rm", "-rf", str(out)], check=True)
    print(f"pdctl bundle --weights, {args.mib} MiB snapshot, median of {args.rounds} rounds")
    print(f"{'run':20} {'s':>8}  what it said")
    for kind, runs in times.items():
        print(f"{kind:20} {statistics.median(runs):8.2f}  {said[kind]}")


if __name__ == "__main__":
    main()
