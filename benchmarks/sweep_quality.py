"""Config quality (issue 35 item 4) from the GPU harness's sweep recordings: per engine
configuration, the measured goodput (requests meeting TTFT and TPOT SLOs per second, per GPU)
of each cell, the configuration pdctl's plan would run, and what the speed model predicts for
each configuration (does it rank them as the engine did?).

usage: python benchmarks/sweep_quality.py [SWEEP_DIR] [--ttft-ms 1000 --tpot-ms 30]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fit_speed import model_of, recordings  # noqa: E402

from pdctl.capacity.gpus import GPUS  # noqa: E402
from pdctl.capacity.speedcells import cells_of, predict  # noqa: E402
from pdctl.capacity.steptime import calibration_for  # noqa: E402


def goodput(cell: dict, ttft_ms: float, tpot_ms: float) -> float:
    """Requests of the cell meeting both SLOs, per second of the cell."""
    ok = sum(1 for _, ttft, e2e, n in cell["raw"]
             if ttft <= ttft_ms and (n < 2 or (e2e - ttft) / (n - 1) <= tpot_ms))
    return ok / cell["wall_s"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep", type=Path, nargs="?",
                    default=ROOT / "tests/fixtures/gpu/vllm023-h100/sweep")
    ap.add_argument("--ttft-ms", type=float, default=1000)
    ap.add_argument("--tpot-ms", type=float, default=30)
    args = ap.parse_args()
    rows: dict[str, list] = {}
    for doc in recordings(args.sweep):
        cal = None
        for cell in cells_of(doc, model_of(doc["model"])):
            cal = cal or calibration_for(GPUS[cell.gpu], cell.engine)
            raw = doc["cells"][cell.key]
            p = predict(cell, cal)
            rows.setdefault(cell.key.split("/")[1], []).append(
                (doc["label"], goodput(raw, args.ttft_ms, args.tpot_ms), raw["ttft_ms"]["p90"],
                 raw["tpot_ms"]["p90"], cell.measured, p))
    for workload, found in rows.items():
        best = max(g for _, g, *_ in found)
        print(f"\n{workload}: goodput = requests/s meeting TTFT <= {args.ttft_ms:g} ms and "
              f"TPOT <= {args.tpot_ms:g} ms, one GPU")
        print("| config | goodput req/s | / best | TTFT p90 ms | TPOT p90 ms "
              "| TPOT p50 meas / pred | out tok/s meas / pred |")
        print("|---|---|---|---|---|---|---|")
        for label, g, t90, p90, m, p in sorted(found, key=lambda r: -r[1]):
            print(f"| {label} | {g:.2f} | {g / best:.2f} | {t90:,.0f} | {p90:.1f} "
                  f"| {m['tpot']:.2f} / {p['tpot']:.2f} | {m['throughput']:,.0f} / "
                  f"{p['throughput']:,.0f} |")


if __name__ == "__main__":
    main()
