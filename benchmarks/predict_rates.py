"""Issue 35: what the frozen speed model predicts for the open-loop cells, written before they
are measured (the GPU harness's `drive.py rates`, tests/gpu/speed.py RATE_WORKLOADS).

A rate cell sends at Poisson times drawn from a seed its key fixes (drive.py: sha256 of the key),
so its arrivals are known here, before the GPU runs; the engine's own facts (KV tokens, batch
limits) are those of the same model's closed-loop recording on the same GPU. The output is
committed; `--check FILE` later compares a measured recording's cells against it, the figures
predicted then, not what a calibration fitted afterwards would say.

    python benchmarks/predict_rates.py > tests/fixtures/gpu/rate-predictions-h100.json
    python benchmarks/predict_rates.py --check tests/fixtures/gpu/vllm023-h100-c/rates/*.json
    python benchmarks/predict_rates.py --set fresh --write   # rate-predictions/<calibration>/
    python benchmarks/predict_rates.py --set fresh --check REC/*.json \
        --predictions tests/fixtures/gpu/rate-predictions/2026-12-06/h100-fresh.json

`--gpu H200` predicts the same cells on a GPU the model has no calibration of and no recording
from: the H100 calibration is carried over by `calibration_for` (nearest GPU, marked
extrapolated) and the KV cache is pdctl's memory model's for that GPU, not a measured one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.fit_speed import model_of  # noqa: E402
from pdctl.capacity.fit import Shape, instance_memory  # noqa: E402
from pdctl.capacity.gpus import GPUS  # noqa: E402
from pdctl.capacity.speedcells import FIGURES, cells_of, predict  # noqa: E402
from pdctl.capacity.steptime import calibration_for  # noqa: E402
from tests.gpu import speed as sp  # noqa: E402

RECORDINGS = ROOT / "tests/fixtures/gpu/vllm023-h100/speed"
GPU, ENGINE = "H100-SXM", "0.23.0"
MODELS = ("qwen3-8b", "mistral-7b")  # drive.py rates' default


def seed_of(key: str) -> int:
    """drive.py engine_cells: a cell's seed (a repeat `#2` shares its first run's)."""
    return int(hashlib.sha256(key.split("#")[0].encode()).hexdigest()[:8], 16)


def rate_doc(model: str, gpu: str = GPU, cell_set: str = "main") -> dict:
    """The model's closed-loop recording with its cells replaced by the open-loop cells to come
    (their send times, nothing measured). On another GPU than the recording's, its KV tokens
    are the memory model's for that GPU."""
    doc = json.loads((RECORDINGS / f"{model}.json").read_text())
    if gpu != doc["spec"]["hardware"]["gpu"]:
        spec = doc["spec"]
        shape = Shape(gpu=gpu, engine=ENGINE, max_model_len=spec["model"]["maxModelLen"])
        util = spec["serve"]["gpuMemoryUtilization"]
        kv = instance_memory(model_of(model), GPUS[gpu].usable_bytes, util, shape).kv_tokens
        doc["spec"] = {**spec, "hardware": {**spec["hardware"], "gpu": gpu}}
        doc["units"] = {u: {**v, "kv_tokens": kv, "kv_from": "pdctl's memory model"}
                        for u, v in doc["units"].items()}
    cells = {}
    for workload, pin, pout, rates in sp.RATE_SETS[cell_set][0]:
        for rate in rates:
            key = sp.rate_key(model, workload, rate)
            times = sp.arrivals(rate, sp.RATE_SUBMIT_S, seed_of(key))
            cells[key] = {"completed": len(times), "requests": len(times), "rate": rate,
                          "prompt_tokens": pin, "output_tokens": pout,
                          "submit_s": sp.RATE_SUBMIT_S, "output_tok_s": 0.0,
                          "raw": [[t, 0.0, 0.0, pout] for t in times]}
    return {**doc, "cells": cells}


def predictions(gpu: str = GPU, cell_set: str = "main") -> dict:
    cal = calibration_for(GPUS[gpu], ENGINE)
    fresh = cell_set == "fresh"
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    # the model's code or constants changed since that commit: its hash would not say which
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "pdctl",
                            "benchmarks", "tests/gpu"], capture_output=True,
                           text=True).stdout.strip()
    out: dict = {"gpu": gpu, "engine": ENGINE, "calibration": cal.provenance.get("fitted"),
                 "calibration_gpu": cal.extrapolated_from or cal.gpu,
                 "commit": commit + ("+changes" if dirty else ""), "set": cell_set,
                 "held_out_rule": "every cell: none is fitted on" if fresh
                 else "sha256(key) % 3 == 0 (tests/gpu/speed.py)",
                 "cells": {}}
    for model in MODELS:
        doc = rate_doc(model, gpu, cell_set)
        out.setdefault("kv_tokens", {})[model] = next(iter(doc["units"].values()))["kv_tokens"]
        for cell in cells_of(doc, model_of(model)):
            p = predict(cell, cal)
            out["cells"][cell.key] = {
                "requests": cell.load.requests, "held_out": fresh or sp.held_out(cell.key),
                **{f: round(p[f], 3) for f, _ in FIGURES}}
    return out


def write(doc: dict) -> Path:
    """The predictions into rate-predictions/<calibration>/<gpu>-<set>.json, never over a
    committed file (SHA256SUMS beside them pins each one)."""
    name = f"{gpu_key(doc['gpu'])}-{doc['set']}.json"
    path = BY_CALIBRATION / doc["calibration"].replace(":", "") / name
    if path.exists():
        raise SystemExit(f"{path} exists: predictions are written once, before the cells run "
                         "(refit first: a new calibration gets a new folder)")
    if doc["commit"].endswith("+changes"):
        raise SystemExit("commit the model first: the predictions name the commit that made them")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def check(paths: list[Path], predictions: Path | None, cell_set: str = "main") -> int:
    """Measured (a repeat `#2` against the same prediction) vs committed, per cell, and the
    MAPE over every recording given."""
    errs: dict[str, list[float]] = {f: [] for f, _ in FIGURES}
    held: dict[str, list[float]] = {f: [] for f, _ in FIGURES}
    print("| cell | " + " | ".join(f"{f} meas / pred" for f, _ in FIGURES) + " |")
    print("|---|" + "---|" * len(FIGURES))
    for path in paths:
        doc = json.loads(path.read_text())
        source = predictions or default_predictions(doc, cell_set)
        print(f"<!-- {path.name} against {source.relative_to(ROOT)} -->")
        compare(doc, json.loads(source.read_text()), errs, held)
    for name, got in (("every cell", errs), ("held out", held)):
        print(f"MAPE, {name}: " + ", ".join(
            f"{f} {100 * sum(v) / len(v):.1f}% ({len(v)})" for f, v in got.items() if v))
    return 0


def compare(doc: dict, committed: dict, errs: dict[str, list[float]],
            held: dict[str, list[float]]) -> None:
    """Print one recording's rows; add its absolute errors to `errs` (and `held`)."""
    for cell in cells_of(doc, model_of(doc["model"])):
        pred = committed["cells"].get(cell.key.split("#")[0])
        if pred is None:
            continue
        row = []
        for f, _ in FIGURES:
            m = cell.measured.get(f)
            e = pred[f] / m - 1 if m else float("nan")
            if m:
                errs[f].append(abs(e))
                if pred["held_out"]:
                    held[f].append(abs(e))
            row.append(f"{m:.4g} / {pred[f]:.4g} ({100 * e:+.1f}%)" if m else "-")
        print(f"| {cell.key} | " + " | ".join(row) + " |")


FIXTURES = ROOT / "tests/fixtures/gpu"
# one folder per calibration: <date fitted>/<gpu>-<set>.json, written before the cells ran
BY_CALIBRATION = FIXTURES / "rate-predictions"


def gpu_key(gpu: str) -> str:
    """How a predictions file names its GPU: 'H100-SXM' -> 'h100'."""
    return gpu.split("-")[0].lower()


def committed_files() -> list[Path]:
    """Every committed predictions file: the first model's (rate-predictions-<gpu>.json, the
    main cells) and each later calibration's, oldest first."""
    return (sorted(FIXTURES.glob("rate-predictions-*.json"))
            + sorted(BY_CALIBRATION.glob("*/*.json")))


def default_predictions(recording: dict, cell_set: str = "main") -> Path:
    """The newest committed predictions for the recording's GPU and cell set."""
    gpu = gpu_key(recording["spec"]["hardware"]["gpu"])
    newest = sorted(BY_CALIBRATION.glob(f"*/{gpu}-{cell_set}.json"))
    return newest[-1] if newest else FIXTURES / f"rate-predictions-{gpu}.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", type=Path, nargs="+",
                    help="measured rates recordings (drive.py rates); MAPE over all of them")
    ap.add_argument("--gpu", default=GPU, choices=sorted(GPUS),
                    help="the GPU to predict for (default: the recordings' own)")
    ap.add_argument("--predictions", type=Path,
                    help="default: the newest tests/fixtures/gpu/rate-predictions/*/<gpu>-<set>"
                         ".json, else rate-predictions-<gpu>.json")
    ap.add_argument("--set", default="main", choices=sorted(sp.RATE_SETS),
                    help="the cells: main (RATE_WORKLOADS) or fresh (never fitted on)")
    ap.add_argument("--write", action="store_true",
                    help="write rate-predictions/<calibration>/<gpu>-<set>.json (never over one)")
    args = ap.parse_args()
    if args.check:
        return check(args.check, args.predictions, args.set)
    doc = predictions(args.gpu, args.set)
    if args.write:
        print(f"wrote {write(doc).relative_to(ROOT)}")
    else:
        print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
