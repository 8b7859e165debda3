"""Fit the speed model's constants (pdctl/capacity/steptime.py) to the GPU harness's speed
recordings, freeze them into pdctl/data/speed/<gpu>-vllm<version>.json, and evaluate once on
the held-out cells (issue 35).

usage: python benchmarks/fit_speed.py RECORDINGS_DIR... [--gpu H200 --engine 0.23.0]
       [--fix CONSTANT=VALUE ...] [--write]

Each RECORDINGS_DIR holds one <model>.json per model (tests/gpu/speed.py: drive.py speed's
closed-loop cells, drive.py rates' open-loop ones). `--fix` holds a constant at a value set
from other evidence instead of fitting it (see docs/performance.md for the one that is). Cells
marked held_out (sha256 of the cell key % 3 == 0, the rule committed before the data) are not
seen by the fit. The fit minimises the squared log ratio predicted / measured of TTFT p50,
TPOT p50 and output throughput over the other cells (scipy.optimize.least_squares, a dev
dependency only: pdctl itself reads the frozen constants). Prints the per-cell table and the
MAPE of the fitted and the held-out cells; --write writes the calibration file with its
provenance.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pdctl.capacity.params import model_config  # noqa: E402
from pdctl.capacity.speedcells import FIGURES, cells_of, errors, mape  # noqa: E402
from pdctl.capacity.steptime import CONSTANTS, Calibration, calibration_for  # noqa: E402

# (constant, lower, upper, log-scaled)
BOUNDS = {
    "fixed_s": (1e-5, 0.02, True),
    "layer_s": (1e-7, 2e-4, True),
    "token_s": (1e-8, 1e-4, True),
    "request_s": (1e-4, 0.2, True),
    "prompt_token_s": (1e-8, 1e-4, True),
    "output_token_s": (1e-7, 1e-3, True),
    "output_step_s": (1e-6, 0.02, True),
    "weights_bw": (0.3, 1.0, False),
    "kv_bw": (0.2, 1.0, False),
    "linear_flops": (0.2, 1.0, False),
    "attn_flops": (0.05, 1.0, False),
    "overlap_k": (1.0, 8.0, False),
}


def load(folder: Path) -> list:
    return [c for doc in recordings(folder) for c in cells_of(doc, model_of(doc["model"]))]


def recordings(folder: Path) -> list[dict]:
    """The GPU harness's per-model (or per-config) recordings in `folder`."""
    docs = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    return [d for d in docs if "cells" in d]


def model_of(name: str):
    """The model of a recording: its config.json in tests/gpu/models."""
    cfg = json.loads((ROOT / "tests/gpu/models" / name / "config.json").read_text())
    return model_config(name, cfg)


def to_x(cal: Calibration, free: list[str]) -> list[float]:
    return [math.log(max(getattr(cal, k), BOUNDS[k][0])) if BOUNDS[k][2] else getattr(cal, k)
            for k in free]


def from_x(cal: Calibration, free: list[str], x) -> Calibration:
    vals = {k: (math.exp(v) if BOUNDS[k][2] else v) for k, v in zip(free, x, strict=True)}
    return replace(cal, **vals)


def residuals(cells, cal):
    res = []
    for e in errors(cells, cal).values():
        for f, _ in FIGURES:
            v = e[f]
            res.append(math.log1p(v) if not math.isnan(v) and v > -1 else 3.0)
    return res


def fit(cells, start: Calibration, free: list[str]) -> Calibration:
    from scipy.optimize import least_squares

    lo = [math.log(BOUNDS[k][0]) if BOUNDS[k][2] else BOUNDS[k][0] for k in free]
    hi = [math.log(BOUNDS[k][1]) if BOUNDS[k][2] else BOUNDS[k][1] for k in free]
    x0 = [min(max(v, a + 1e-9), b - 1e-9)
          for v, a, b in zip(to_x(start, free), lo, hi, strict=True)]
    sol = least_squares(
        lambda x: residuals(cells, from_x(start, free, x)), x0, bounds=(lo, hi),
        diff_step=1e-3, max_nfev=400,
    )
    return from_x(start, free, sol.x)


def table(cells, cal) -> str:
    errs = errors(cells, cal)
    lines = ["| cell | set | TTFT p50 ms meas / pred | TPOT p50 ms meas / pred "
             "| out tok/s meas / pred |", "|---|---|---|---|---|"]
    from pdctl.capacity.speedcells import predict

    for c in cells:
        p = predict(c, cal)
        e = errs[c.key]
        row = [c.key, "below bound" if c.below_bound else "held out" if c.held_out else "fit"]
        for f, _ in FIGURES:
            if c.measured.get(f) is None or p.get(f) is None:
                row.append("-")
            else:
                row.append(f"{c.measured[f]:,.4g} / {p[f]:,.4g} ({100 * e[f]:+.1f}%)")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("recordings", type=Path, nargs="+")
    ap.add_argument("--fix", nargs="*", default=[], metavar="CONSTANT=VALUE")
    ap.add_argument("--note", help="how the fixed constants were set, kept in the provenance")
    ap.add_argument("--gpu", default="H200")
    ap.add_argument("--engine", default="0.23.0")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--free", nargs="*", default=list(CONSTANTS))
    args = ap.parse_args()
    fixed = {k: float(v) for k, v in (a.split("=", 1) for a in args.fix)}
    cells = [c for folder in args.recordings for c in load(folder)
             if c.gpu == args.gpu and c.engine == args.engine]
    below = [c for c in cells if c.below_bound]
    train = [c for c in cells if not c.held_out and not c.below_bound]
    test = [c for c in cells if c.held_out and not c.below_bound]
    if below:
        print("not used (TPOT below the weight-read bound of its batch):",
              ", ".join(c.key for c in below))
    from pdctl.capacity.gpus import GPUS

    start = replace(calibration_for(GPUS[args.gpu], args.engine), **fixed)  # nearest GPU's
    print(f"{len(cells)} cells: {len(train)} fitted, {len(test)} held out")
    print("start, fitted cells:", {k: round(v, 1) for k, v in mape(errors(train, start)).items()})
    cal = fit(train, start, [k for k in args.free if k not in fixed])
    fitted = mape(errors(train, cal))
    held = mape(errors(test, cal)) if test else {}
    print("constants:", {k: float(f"{getattr(cal, k):.4g}") for k in CONSTANTS})
    print("MAPE % fitted cells:", {k: round(v, 1) for k, v in fitted.items()})
    print("MAPE % held-out cells:", {k: round(v, 1) for k, v in held.items()})
    print(table(cells, cal))
    if args.write:
        doc = {
            "gpu": args.gpu,
            "engine": args.engine,
            "constants": {k: float(f"{getattr(cal, k):.5g}") for k in CONSTANTS},
            "provenance": {
                # to the minute: two fits of one day file their predictions apart
                "fitted": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M"),
                "script": "benchmarks/fit_speed.py",
                "recordings": sorted(str(p.relative_to(ROOT)) for folder in args.recordings
                                     for p in folder.resolve().glob("*.json")),
                "fixed": fixed,
                **({"note": args.note} if args.note else {}),
                "cells_fitted": [c.key for c in train],
                "cells_held_out": [c.key for c in test],
                "cells_below_bound": [c.key for c in below],
                "mape_fitted_pct": {k: round(v, 2) for k, v in fitted.items()},
                "mape_held_out_pct": {k: round(v, 2) for k, v in held.items()},
                "held_out_rule": "sha256(cell key) % 3 == 0 (tests/gpu/speed.py held_out)",
            },
        }
        out = ROOT / "pdctl/data/speed" / f"{args.gpu.lower()}-vllm{args.engine}.json"
        if out.exists() and "eager" in (old := json.loads(out.read_text())):
            doc["eager"] = old["eager"]  # fitted apart, on a sweep's --enforce-eager cells
        out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
