"""`plan`'s "nearest that fits" suggestions: --max-num-seqs is offered (the sampler profile is
often the largest term), and every suggestion, applied to the spec, is one that validate and
plan accept and that fits (never a change another rule refuses)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.capacity.conftest import serve_spec, slices_spec
from tests.helpers import run_cli as run
from tests.helpers import written

OSS = serve_spec("openai/gpt-oss-120b", 131072, gpus=2, head="hardware: {gpu: H100}\n",
                 serve="replicas: 1, tensorParallel: 1, gpuMemoryUtilization: 0.9")
FP8 = serve_spec("Qwen/Qwen3-30B-A3B-FP8", 40960, gpus=4, head="hardware: {gpu: L4}\n")
SLICE = slices_spec(6, 32768, "{namespace: llm, storage: {type: emptyDir}}", head="")
LONG_WORKLOAD = serve_spec("meta-llama/Llama-3.1-8B", 131072, gpus=2, head=(
    "hardware: {gpu: L4}\nworkload: {promptTokens: 60000, outputTokens: 1000}\n"))


def _plan(path: Path, capsys) -> tuple[int, dict]:
    code, out, err = run(["plan", str(path), "-o", "json"], capsys)
    assert code in (0, 1), err
    return code, json.loads(out)


def _applied(spec: dict, role: str, alt: dict) -> dict:
    """The spec with one suggestion applied (the fields the suggestion's shape sets)."""
    out = json.loads(json.dumps(spec))
    section = out[role]
    section["tensorParallel"] = alt["tensorParallel"]
    if alt["pipelineParallel"] > 1:
        section["pipelineParallel"] = alt["pipelineParallel"]
    if alt["kvCacheDtype"] != "auto":
        out["model"]["kvCacheDtype"] = alt["kvCacheDtype"]
    if alt["maxModelLen"]:
        out["model"]["maxModelLen"] = alt["maxModelLen"]
    for key in ("maxNumSeqs", "maxNumBatchedTokens"):
        if alt[key]:
            section[key] = alt[key]
    if alt.get("gpuMemoryUtilization") and not alt.get("share"):
        section["gpuMemoryUtilization"] = alt["gpuMemoryUtilization"]
    for key, value in (alt.get("share") or {}).items():
        section["share"][key] = value
        if key == "perGpu":
            section["replicas"] = value
            section["share"].pop("gpuMemoryPercent", None)
    return out


def test_gpt_oss_120b_on_one_h100_is_offered_fewer_sequences(tmp_path: Path, capsys) -> None:
    path = written(tmp_path / "oss.yaml", OSS)
    code, data = _plan(path, capsys)
    assert code == 1
    changes = [a["change"] for a in data["roles"][0]["alternatives"]]
    seqs = [a for a in data["roles"][0]["alternatives"] if a["maxNumSeqs"]]
    assert seqs, changes
    assert seqs[0]["change"].startswith(f"--max-num-seqs {seqs[0]['maxNumSeqs']}")
    # tens of thousands of tokens, not one max-length sequence
    assert seqs[0]["kvTokens"] > 100_000
    code, out, _ = run(["plan", str(path)], capsys)
    assert "nearest that fits: --max-num-seqs" in out


@pytest.mark.parametrize(
    "text", [OSS, FP8, SLICE, LONG_WORKLOAD], ids=["gpt-oss", "fp8-blocks", "slices", "workload"]
)
def test_every_suggestion_is_accepted_and_fits(text: str, tmp_path: Path, capsys) -> None:
    path = written(tmp_path / "s.yaml", text)
    code, data = _plan(path, capsys)
    assert code == 1  # something does not fit, so there are suggestions
    spec = yaml.safe_load(text)
    tried = 0
    for r in data["roles"]:
        for alt in r["alternatives"]:
            fixed = tmp_path / f"fix{tried}.yaml"
            fixed.write_text(yaml.safe_dump(_applied(spec, r["role"], alt)))
            vcode, _, verr = run(["validate", str(fixed)], capsys)
            assert vcode == 0, (alt["change"], verr)
            assert "does not fit" not in verr, alt["change"]
            pcode, out, perr = run(["plan", str(fixed), "-o", "json"], capsys)
            assert pcode == 0, (alt["change"], perr, out[-400:])
            tried += 1
    assert tried
