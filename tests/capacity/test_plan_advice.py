"""`pdctl plan`'s advice is true and the same in the table and in `-o json` (review s21: slice
rows, smallest vs nearest fit, unmeetable TPOT, packing numbers, request length, TP vs MLP
width, model list, --gpu list, no speed advice for a role that does not fit)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pdctl.capacity import advice
from pdctl.capacity.fit import valid_tp
from pdctl.capacity.gpus import GPUS
from pdctl.capacity.models import BUILTIN
from pdctl.capacity.params import model_config
from pdctl.cli.plan_table import union_rows
from pdctl.plan.parallel import Dims
from pdctl.plan.parallel import valid_tp as dims_valid_tp
from tests.capacity.conftest import slices_spec
from tests.helpers import cli, written
from tests.helpers import run_cli as run

ROOT = Path(__file__).resolve().parents[2]
PHASE0 = (ROOT / "examples" / "phase0-conda.yaml").read_text()


def _flat(text: str) -> str:
    """The table's text without its borders and wrapping: one space between words."""
    return " ".join(re.sub(r"[│┃┏┓┗┛┡┩└┘━─┳┻╇╈┼┴┬]", " ", text).split())


def _spec(tmp_path: Path, text: str, name: str = "s.yaml") -> str:
    path = written(tmp_path / name, text)
    return str(path)


def _both(argv: list[str], capsys) -> tuple[str, dict]:
    """The table's text (flattened) and the JSON of the same plan."""
    code, out, err = run(["plan", *argv, "-o", "wide"], capsys)
    assert code in (0, 1), err
    jcode, jout, jerr = run(["plan", *argv, "-o", "json"], capsys)
    assert jcode == code, jerr
    return _flat(out), json.loads(jout)


PHASE3 = slices_spec()


def test_phase3_table_shows_the_decode_slice_rows(tmp_path: Path, capsys) -> None:
    """Before: the rows came from the first role (prefill, no slice): no slice rows, and the
    util row's "how" said 'at most 0.90'."""
    out, data = _both([_spec(tmp_path, PHASE3)], capsys)
    sl = {r["role"]: r for r in data["roles"]}["decode"]["slice"]
    assert f"HAMi slice (nvidia.com/gpumem) - {sl['sliceMib']:,} MiB" in out
    assert f"slices per GPU - {sl['perGpu']} (room for {sl['maxPerGpu']} minimal)" in out
    assert f"smallest slice - {sl['minSliceMib']:,} MiB" in out
    assert f"util inside slice - {sl['gpuMemoryUtilization']:.2f}" in out
    assert "at most 0.95" in out and "at most 0.90" not in out
    # packing is weighed on a whole GPU, not the slice the table's decode column shows
    assert "one instance's KV on a whole GPU would hold" in data["advice"]["lines"][0]


def test_table_rows_are_the_union_of_the_roles_in_a_stable_order() -> None:
    rows = union_rows([[("a", "1", "ha"), ("b", "2", "hb")], [("a", "3", "ha"), ("c", "4", "hc")]])
    assert rows == [("a", ["1", "3"], "ha"), ("b", ["2", "-"], "hb"), ("c", ["-", "4"], "hc")]


def _llama70_tp1(tmp_path: Path) -> str:
    text = (
        PHASE0.replace("Llama-3.1-8B", "Llama-3.1-70B")
        .replace("tensorParallel: 2", "tensorParallel: 1")
        .replace("replicas: 2 ", "replicas: 1 ")
        # 32k: TP 2 then needs 0.95 (at 8k vLLM 0.33's sampler profile leaves TP 2 room at 0.90)
        .replace("maxModelLen: 8192", "maxModelLen: 32768")
    )
    return _spec(tmp_path, text)


def test_smallest_fit_and_nearest_fit_say_the_same(tmp_path: Path, capsys) -> None:
    """Before: 'smallest fit on this GPU: TP 2' (at 0.92) beside 'nearest that fits:
    tensorParallel 4' (at the spec's 0.90); TP 2 at 0.95 was never offered."""
    out, data = _both([_llama70_tp1(tmp_path), "--gpu", "H100-SXM"], capsys)
    role = data["roles"][0]
    assert role["smallestFit"]["tensorParallel"] == 2
    assert role["smallestFit"]["gpuMemoryUtilization"] == 0.95
    assert "smallest fit on this GPU TP 2 at util 0.95" in out
    changes = [a["change"] for a in role["alternatives"]]
    assert "tensorParallel 2 at --gpu-memory-utilization 0.95" in changes
    assert "tensorParallel 4 at --gpu-memory-utilization 0.90" in changes
    for change in changes:
        assert f"nearest that fits: {change}" in out


def test_unfit_role_gets_the_fit_advice_only(tmp_path: Path, capsys) -> None:
    """Before: 19 tok/s, 'P:D 0.02' and 'KV holds 0 sequences' packing advice."""
    out, data = _both([_llama70_tp1(tmp_path), "--gpu", "H100-SXM"], capsys)
    assert data["fits"] is False and data["pd"] is None
    assert data["roles"][0]["decode"] is None
    assert data["advice"]["case"] == "does-not-fit"
    assert "P:D for" not in out and "packing advice (" not in out and "tokens/s -" in out
    assert "advice (does-not-fit): - serve does not fit" in out
    assert "holds 0 sequences" not in out + json.dumps(data)


def test_tpot_no_batch_meets_is_not_met(tmp_path: Path, capsys) -> None:
    """Before: 'decode batch 1' and 'one instance can batch 1 sequences; raise
    --max-num-seqs', no warning."""
    spec = _spec(tmp_path, PHASE0)
    out, data = _both([spec, "--gpu", "H100-SXM", "--tpot-ms", "2"], capsys)
    one = data["pd"]["batch1TpotMs"]
    assert one > 2 and data["pd"]["tpotOk"] is False
    assert data["advice"]["case"] == "tpot-not-met"
    said = f"TPOT target NOT met: even one sequence takes {one:.2f} ms per token on an H100-SXM"
    assert said in out
    assert "raise --max-num-seqs" not in out
    assert f"even one sequence takes {one:.2f} ms per token" in data["advice"]["lines"][0]
    # a target that batch 1 meets: no such line
    out, data = _both([spec, "--gpu", "H100-SXM", "--tpot-ms", "50"], capsys)
    assert data["pd"]["tpotOk"] is True and "NOT met" not in out


@pytest.mark.parametrize("extra", [[], ["--rate", "1e12"]])
def test_packing_advice_uses_the_table_numbers(tmp_path: Path, capsys, extra) -> None:
    """Before: 'one instance can batch 295 sequences; raise --max-num-seqs' (295: the roofline
    ridge) beside the table's 'decode batch 746' and the default max-num-seqs 1024."""
    out, data = _both([_spec(tmp_path, PHASE0), *extra], capsys)
    role = data["roles"][0]
    kv = role["decode"]["batch"]  # min(max-num-seqs 1024, KV 746): the KV here
    assert role["maxNumSeqs"] == 1024 and kv < 1024
    assert f"decode batch {kv}" in out
    text = " ".join(data["advice"]["lines"])
    assert f"holds {kv}" in text and "--max-num-seqs 1024 already allows it" in text
    assert "raise --max-num-seqs" not in text and "raise --max-num-seqs" not in out
    for line in data["advice"]["lines"]:
        assert " ".join(line.split()) in out


def test_packing_advice_raises_max_num_seqs_only_when_lower() -> None:
    low = advice.packing_advice(600, 200, None, max_num_seqs=128)
    assert any("raise --max-num-seqs from 128 to 200" in line for line in low.lines)
    high = advice.packing_advice(600, 200, 400, max_num_seqs=1024)
    assert high.case == "busy"
    assert not any("raise" in line for line in high.lines)


def test_prompt_longer_than_max_model_len_is_refused(tmp_path: Path, capsys) -> None:
    """Before: 'P:D for 100,000 in', 'KV holds 9 sequences', exit 0."""
    spec = _spec(tmp_path, PHASE0)
    for fmt in ("table", "json"):
        code, out, err = run(["plan", spec, "--prompt-tokens", "100000", "-o", fmt], capsys)
        assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
        assert "longer than maxModelLen 8,192: vLLM rejects it" in err
        assert "use --prompt-tokens 7936 or fewer" in err
    _, err = cli(["plan", spec, "--prompt-tokens", "7936", "--output-tokens", "256"])


def test_spec_workload_longer_than_max_model_len_is_located(tmp_path: Path, capsys) -> None:
    spec = _spec(tmp_path, PHASE0 + "workload: {promptTokens: 9000}\n")
    code, _, err = run(["plan", spec], capsys)
    assert code == 2 and "workload.promptTokens" in err and err.count("\n") == 1, err


QWEN7 = """\
name: q
phase: 0
model: {name: Qwen/Qwen2.5-7B-Instruct, maxModelLen: 8192}
engine: {version: "0.33.0"}
hosts:
  - {name: gpu-a, address: 192.0.2.10, gpus: [%s], runtime: conda}
serve: {replicas: 1, tensorParallel: %d}
"""


def test_tp_suggestion_divides_the_mlp_width(tmp_path: Path, capsys) -> None:
    """Before: 'use tensorParallel 4 or 28'; Qwen2.5-7B's intermediate_size 18944 is not a
    multiple of 28, so vLLM's column-parallel layers refuse TP 28."""
    spec = _spec(tmp_path, QWEN7 % (", ".join(map(str, range(8))), 8))
    code, out, err = run(["plan", spec], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "use tensorParallel 4 (valid: 1, 2, 4)" in err and "or 28" not in err
    model = model_config("Qwen/Qwen2.5-7B-Instruct")
    assert not valid_tp(model, 28) and valid_tp(model, 4)
    dims = Dims("m", heads=28, kv_heads=4, layers=28, intermediate=18944)
    assert dims_valid_tp(dims) == [1, 2, 4]
    # the experts' width too, unless expert parallel (whole experts per rank) is on
    moe = Dims("m", heads=24, kv_heads=24, layers=4, experts=8, moe_intermediate=1000)
    assert 3 not in dims_valid_tp(moe) and 3 in dims_valid_tp(moe, expert_parallel=True)


def test_tp_suggestion_stays_within_a_host(tmp_path: Path, capsys) -> None:
    """Qwen2.5-7B on a host of 2 GPUs asking TP 3: the suggestion is 2, not 4."""
    spec = _spec(tmp_path, QWEN7 % ("0, 1", 3))
    code, _, err = run(["plan", spec], capsys)
    assert code == 2, err
    assert "use tensorParallel 2 (the instance has at most 2 GPUs on a host)" in err, err
    # a multi-node instance (serve.nodes 2) has both hosts' GPUs: 4 may be suggested
    two = QWEN7.replace(
        "serve:", "  - {name: gpu-b, address: 192.0.2.11, gpus: [0, 1], runtime: conda}\nserve:"
    ).replace("serve: {", "serve: {nodes: 2, ")
    code, _, err = run(["plan", _spec(tmp_path, two % ("0, 1", 3), "two.yaml")], capsys)
    assert code == 2 and "use tensorParallel 2 or 4 (valid" in err, err


def test_unknown_model_lists_whole_names(tmp_path: Path, capsys) -> None:
    """Before: the list was cut mid-word ('mixtral-8x ... a22b')."""
    spec = _spec(tmp_path, PHASE0.replace("meta-llama/Llama-3.1-8B-Instruct", "acme/Unknown-13B"))
    code, _, err = run(["plan", spec], capsys)
    assert code == 2 and err.count("\n") == 1, err
    listed = err.split("built-in models: ")[1].split(" and ")[0].split(", ")
    assert listed and all(name in BUILTIN for name in listed), listed
    more = len(BUILTIN) - len(listed)
    assert f"and {more} more (docs/capacity.md lists them)" in err and " ... " not in err


def test_gpu_help_lists_every_gpu_of_the_table(capsys) -> None:
    """Before: the --gpu help stopped at RTX-4090 (RTX-3090 and RTX-4060 are accepted)."""
    out, _ = cli(["plan", "--help"])
    flat = _flat(out)
    for name in GPUS:
        assert re.search(rf"[ :,]{re.escape(name)}[,.]", flat), name
