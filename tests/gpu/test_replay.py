"""Replays the H200 recordings (tests/fixtures/gpu/vllm023-h200/, made by tests/gpu/h200.sh with
vLLM 0.23.0): what pdctl saw there must hold, and today's pdctl must still plan and render what
was run there (the evidence covers the current code, or a test says it no longer does)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from pdctl.capacity.fromlog import parse_log
from tests.targets.testbed import pdctl

REC = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "vllm023-h200"
MODELS = Path(__file__).resolve().parent / "models"


def results(part: str) -> dict:
    return json.loads((REC / part / "results.json").read_text())


def recorded_json(path: Path) -> dict:
    """A recorded pdctl command's JSON output (the file starts with the command line)."""
    text = path.read_text()
    return json.loads(text[text.index("{") : text.rindex("}") + 1])


def local_spec(recorded: Path, tmp_path: Path) -> Path:
    """The recorded spec with its model config read from tests/gpu/models (the H200's
    /root/models held the same files)."""
    spec = yaml.safe_load(recorded.read_text())
    name = Path(spec["model"]["config"]).parent.name
    spec["model"]["config"] = str(MODELS / name / "config.json")
    out = tmp_path / "spec.yaml"
    out.write_text(yaml.safe_dump(spec, sort_keys=False))
    return out


def planned(spec: Path, role: str) -> dict:
    res = pdctl("plan", str(spec), "-o", "json")
    assert res.returncode in (0, 1), res.stderr
    return next(r for r in json.loads(res.stdout)["roles"] if r["role"] == role)


def engine_kv_tokens(log: Path) -> int:
    seen = parse_log(log.read_text())
    assert seen.kv_tokens, f"{log.name}: no 'GPU KV cache size' line"
    return seen.kv_tokens


# ------------------------------------------------------------------------- phase 0


def test_phase0_up_served_reported_and_went_down():
    res = results("phase0")
    assert res["up_exit"] == 0
    assert res["completion_tokens"] == 16
    assert [b["ok"] for b in res["batches"]] == [b["batch"] for b in res["batches"]]
    assert "http://127.0.0.1:8000/v1" in (REC / "phase0" / "up.txt").read_text()
    (row,) = recorded_json(REC / "phase0" / "status.txt")["instances"]
    assert (row["unit"], row["health"], row["model"]) == ("g0-serve-0", "healthy", "qwen3-8b")
    top = recorded_json(REC / "phase0" / "top.txt")
    (inst,) = top["instances"]
    assert inst["error"] is None and inst["generation_tps"] > 1000
    assert inst["gpus"] == [["h200", 0]]
    assert (REC / "phase0" / "down.txt").read_text().rstrip().endswith("exit 0")


def test_phase0_decode_throughput_grows_with_the_batch():
    tok_s = [b["tok_s"] for b in results("phase0")["batches"]]
    assert tok_s == sorted(tok_s) and tok_s[-1] > 2 * tok_s[0]


def test_phase0_plan_kv_tokens_within_5_percent_of_the_engine(tmp_path):
    spec = local_spec(REC / "phase0" / "spec.yaml", tmp_path)
    predicted = planned(spec, "serve")["kvTokens"]
    real = engine_kv_tokens(REC / "phase0" / "g0-serve-0.log")
    assert real == 794_016
    assert abs(predicted - real) / real <= 0.05, (predicted, real)


# ------------------------------------------------------------------------- phase 2


def test_phase2_nixl_moved_the_prompts_kv_through_the_router():
    res = results("phase2")
    assert res["up_exit"] == 0
    assert res["endpoint"] == "http://127.0.0.1:8300/v1"
    before, after = res["external_kv_tokens"]
    prompts = [a["usage"]["prompt_tokens"] for a in
               json.loads((REC / "phase2" / "completions.json").read_text())]
    # All but each prompt's last token came from the prefill engine over NIXL.
    assert after - before >= sum(prompts) - 2 * len(prompts), (before, after, prompts)
    assert all("___prefill_addr_127.0.0.1:8100___decode_addr_127.0.0.2:8200_" in i
               for i in res["request_ids"])
    assert res["pd_batch"]["ok"] == res["pd_batch"]["batch"]


def test_phase2_status_and_top_saw_every_role():
    rows = recorded_json(REC / "phase2" / "status.txt")["instances"]
    assert {r["role"]: r["health"] for r in rows} == {
        "prefill": "healthy", "decode": "healthy", "router": "healthy"}
    top = recorded_json(REC / "phase2" / "top.txt")
    decode = next(i for i in top["instances"] if i["role"] == "decode")
    assert decode["totals"]["prompt_tokens_external_kv_transfer"] > 0


def test_phase2_engines_started_together_on_one_gpu_sized_their_kv_apart():
    """Prefill and decode on one GPU, util 0.42 each, started in one stage: each profile saw
    the other's allocations, so the same util gave KV caches 10% apart. pdctl's advice for
    sharing a GPU between roles (docs) rests on this."""
    kv = {role: engine_kv_tokens(REC / "phase2" / f"g2-{role}-0.log")
          for role in ("prefill", "decode")}
    assert kv == {"prefill": 193_280, "decode": 173_264}


# ------------------------------------------------------------------------- phase 3


SHAPES = ("2", "3", "4")


@pytest.mark.parametrize("n", SHAPES)
def test_phase3_every_engine_started_in_its_slice_and_decoded(n):
    shape = results("phase3")["shapes"][n]
    assert shape["healthy"] == [True] * int(n)
    (run,) = shape["batches"]
    assert [p["ok"] for p in run["per_engine"]] == [run["batch_per_engine"]] * int(n)
    limit = int(re.search(r"CUDA_DEVICE_MEMORY_LIMIT=(\d+)m",
                          (REC / "phase3" / f"n{n}" / "decode-0.start.sh").read_text()).group(1))
    # Nothing ran out of memory: each engine's peak (nvidia-smi, CUDA context included)
    # stayed inside its slice with room left.
    for pid, peak in run["peak_mib_by_pid"].items():
        assert limit - peak >= 512, (pid, peak, limit)


@pytest.mark.parametrize("n", SHAPES)
def test_phase3_today_renders_what_ran_on_the_h200(n, tmp_path):
    """The slice size and util the H200 run used are what pdctl renders today for that spec."""
    ran = (REC / "phase3" / f"n{n}" / "decode-0.start.sh").read_text()
    spec = local_spec(REC / "phase3" / f"n{n}" / "spec.yaml", tmp_path)
    out = pdctl("render", str(spec))
    assert out.returncode == 0, out.stderr
    now = out.stdout.split(f"#### hosts/h200/g3n{n}-decode-0/start.sh", 1)[1]
    for pattern in (r"CUDA_DEVICE_MEMORY_LIMIT=\d+m", r"--gpu-memory-utilization \S+",
                    r"LD_PRELOAD=\S+"):
        assert re.search(pattern, ran).group(0) == re.search(pattern, now).group(0), pattern


@pytest.mark.parametrize("n", SHAPES)
def test_phase3_plan_kv_per_slice_within_5_percent_of_the_engines(n, tmp_path):
    """pdctl's KV per slice against the engines' median (n=4: three engines got 124,112
    tokens, the one that profiled while its neighbours allocated 117,376)."""
    spec = local_spec(REC / "phase3" / f"n{n}" / "spec.yaml", tmp_path)
    predicted = planned(spec, "decode")["kvTokens"]
    got = sorted(u["kv_tokens"] for u in results("phase3")["shapes"][n]["units"].values())
    typical = got[len(got) // 2]
    assert abs(predicted - typical) / typical <= 0.05, (predicted, got)


def test_phase3_slices_time_slice_the_gpu():
    """N engines at batch 64 each give about what ONE engine gives at batch 64 on the whole
    GPU (0.94x measured), far below one engine at the same total batch."""
    whole = {b["batch"]: b["tok_s"] for b in results("phase0")["batches"]}
    for n in SHAPES:
        (run,) = results("phase3")["shapes"][n]["batches"]
        per_gpu = run["per_gpu_tok_s"]
        assert 0.85 <= per_gpu / whole[64] <= 1.0, (n, per_gpu, whole[64])
        assert per_gpu / whole[64 * int(n)] <= 0.65, (n, per_gpu, whole[64 * int(n)])


# ------------------------------------------------------------------------- start-ups


def test_startup_logs_parse_to_what_the_harness_read():
    """pdctl's log reader (plan --from-log) reads every recorded start-up as the harness did."""
    runs = json.loads((REC / "startups" / "results.json").read_text())
    assert len(runs) == 8
    for name, run in runs.items():
        seen = parse_log((REC / "startups" / f"{name}.log").read_text())
        assert seen.kv_tokens == run["kv_tokens"], name


# ------------------------------------------------------------ sliding-window KV counts

SLIDING = ("mistral-7b-u0.6", "gemma-2-9b-u0.85")


def startup_spec(name: str, tmp_path: Path) -> Path:
    """A phase-0 spec of the recorded start-up's command line (model, util, max-model-len)."""
    cmd = results("startups")[name]["cmd"]
    model = Path(cmd[1]).name
    spec = {
        "name": "kv",
        "phase": 0,
        "model": {
            "name": cmd[1],
            "maxModelLen": int(cmd[cmd.index("--max-model-len") + 1]),
            "config": str(MODELS / model / "config.json"),
        },
        "engine": {"version": "0.23.0"},
        "hardware": {"gpu": "H200"},
        "hosts": [{"name": "h200", "address": "127.0.0.1", "gpus": [0], "runtime": "venv",
                   "venv": "/opt/torch/.venv"}],
        "serve": {"gpuMemoryUtilization": float(cmd[cmd.index("--gpu-memory-utilization") + 1])},
    }
    out = tmp_path / "spec.yaml"
    out.write_text(yaml.safe_dump(spec, sort_keys=False))
    return out


@pytest.mark.parametrize("name", SLIDING)
def test_sliding_window_kv_tokens_are_vllms_count_within_5_percent(name, tmp_path):
    """Mistral-7B (sliding window on every layer) and Gemma-2-9B (hybrid): the tokens pdctl
    prints as "KV cache size (vLLM's count)", in the table and in `-o json` (`kvTokens`), and
    its concurrency, against the log's "GPU KV cache size" and "Maximum concurrency" lines."""
    spec = startup_spec(name, tmp_path)
    role = planned(spec, "serve")
    log = parse_log((REC / "startups" / f"{name}.log").read_text())
    assert (log.kv_tokens, log.max_concurrency) == (
        results("startups")[name]["kv_tokens"], results("startups")[name]["max_concurrency"])
    assert abs(role["kvTokens"] - log.kv_tokens) / log.kv_tokens <= 0.05, role["kvTokens"]
    conc = role["concurrencyAtMaxModelLen"]
    assert abs(conc - log.max_concurrency) / log.max_concurrency <= 0.05, conc
    # vLLM's count is concurrency x max_model_len, the tokens stored at once a separate key
    assert abs(role["kvTokens"] - conc * role["maxModelLen"]) <= role["maxModelLen"] * 0.01
    assert role["kvTokenSlots"] >= role["kvTokens"]
    table = pdctl("plan", str(spec), "-o", "wide")
    assert table.returncode == 0, table.stderr
    text = " ".join(table.stdout.split())
    assert f"KV cache size (vLLM's count) │ {role['kvTokens']:,} tokens" in text
