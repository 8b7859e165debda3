"""`pdctl bench` on Mooncake over TCP keeps a step's requests in flight within what one KV
pull carries once the KV cache is fragmented (pdctl/capacity/kv_pull.py `carried`).

On the H100 (tests/fixtures/gpu/vllm023-h100-g/), the default step (32 requests of 1,024
prompt tokens at once, Qwen3-8B: 72 KV regions x 64 blocks = 4,608 descriptors each) had 31
requests' pulls to one decode in flight together, 142,848 descriptors: past the 131,070 the
transport holds with pdctl's settings, so prefill's batches were refused (`ret=-1`) and vLLM
0.23.0's decode kept the 31 requests waiting for KV."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdctl.bench.load import Step, Workload, bench_args, capped, longest_prompt, requests_of
from pdctl.bench.run import capped_note
from pdctl.capacity import model_config, spec_model_config
from pdctl.capacity.kv_pull import carried, known_model
from pdctl.cli.bench_show import show
from pdctl.plan.mooncake_tcp import CAPACITY
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples/phase2-mooncake-tcp.yaml"  # Qwen2.5-7B: 28 layers, 56 KV regions
H100 = ROOT / "tests/fixtures/gpu/vllm023-h100-g/phase2-mooncake"
QWEN3_8B = model_config("Qwen/Qwen3-8B")  # 36 layers: 72 KV regions


def spec_of(text: str):
    from pdctl.spec import load_text

    return load_text(text, "spec.yaml")[0]


def qwen3_8b(text: str) -> str:
    return text.replace("name: Qwen/Qwen2.5-7B-Instruct", "name: Qwen/Qwen3-8B")


def test_the_h100_run_s_step_of_32_was_past_what_the_transport_holds() -> None:
    spec = spec_of((H100 / "spec.yaml").read_text())
    # the harness's model.config: Qwen3-8B's own config.json
    model = spec_model_config(spec.model, json.loads(
        (ROOT / "tests/gpu/models/qwen3-8b/config.json").read_text()))
    assert carried(spec, 1024, model) == CAPACITY // (72 * 64) == 28
    waiting = [line for line in (H100 / "metrics-decode-after-bench.txt").read_text().splitlines()
               if line.startswith("vllm:num_requests_waiting_by_reason") and "deferred" in line]
    assert waiting and waiting[0].endswith(" 31.0")  # decode kept 31 waiting for KV
    assert 31 * 72 * 64 == 142_848 > CAPACITY
    refused = (H100 / "prefill-log-excerpt.txt").read_text()
    assert "failed (ret=-1) after 0.1" in refused and "(41472 descriptors" in refused
    # pdctl's table knows it by name too (the path's last part); a model it does not know is
    # counted as 72 KV regions
    known = known_model(spec)
    assert known is not None and known.layers == 36 and carried(spec, 1024, known) == 28
    assert carried(spec_of(qwen3_8b(EXAMPLE.read_text())), 1024, QWEN3_8B) == 28
    assert carried(spec, 1024, None) == 28


def test_the_example_s_model_carries_36_and_longer_prompts_fewer() -> None:
    spec = spec_of(EXAMPLE.read_text())
    model = known_model(spec)
    assert model is not None and model.layers == 28
    assert carried(spec, 1024, model) == 36
    assert carried(spec, 4096, model) == CAPACITY // (56 * 256) == 9
    assert carried(spec, 1_000_000, model) == 1  # alone past the queue: `pdctl plan` warns


def test_on_the_h100_the_bounded_step_passed_where_the_unbounded_one_stalled() -> None:
    """The same deployment a few minutes later (a fresh machine, pdctl with this bound and
    MC_TRANSFER_TIMEOUT): `pdctl bench` sent its step with at most 28 in flight, every request
    was answered, 32,768 prompt tokens came over the connector, none failed, exit 0."""
    run = H100.parent / "phase2-mooncake-bench"
    report = json.loads((run / "bench.json").read_text())
    (step,) = report["steps"]
    assert step["load"] == "concurrency 28" and step["capped"]["asked"] == "all at once"
    spec = spec_of((run / "spec.yaml").read_text())
    assert step["capped"]["concurrency"] == carried(spec, 1024, known_model(spec)) == 28
    assert (step["measured"]["completed"], step["measured"]["failed"]) == (32, 0)
    assert not step["failures"] and not step["kvEvents"] and report["canary"]["ok"]
    decode = next(r for r in step["metrics"]["instances"] if r["role"] == "decode")
    assert decode["kv_tokens_received"] >= 32 * 1024
    assert json.loads((run / "results.json").read_text())["bench_exit"] == 0
    metrics = (run / "prefill-log-excerpt.txt").read_text()
    assert "Num failed transfers=0" in metrics and "failed transfers=1" not in metrics


def test_a_larger_block_size_and_a_smaller_queue_in_the_spec_count() -> None:
    text = qwen3_8b(EXAMPLE.read_text())
    bigger = text.replace("decode: {replicas: 2,", "decode: {extraArgs: [--block-size, '64'], "
                          "replicas: 2,", 1)
    assert bigger != text
    assert carried(spec_of(bigger), 1024, QWEN3_8B) == CAPACITY // (72 * 16) == 113
    smaller = text.replace("\nprefill: {", "\nprefill: {env: {MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER:"
                           " '1024'}, ", 1)
    assert carried(spec_of(smaller), 1024, QWEN3_8B) == (1024 + 65535) // 4608 == 14


@pytest.mark.parametrize("example", ["phase2-mooncake-rdma.yaml", "phase2-nixl-hosts.yaml",
                                     "phase0-conda.yaml"])
def test_no_bound_without_mooncake_over_tcp(example: str) -> None:
    assert carried(spec_of((ROOT / "examples" / example).read_text()), 1024, QWEN3_8B) is None


def test_a_step_keeps_at_most_that_many_in_flight_and_its_requests() -> None:
    w = Workload(requests=32)
    assert capped(Step(), 32, 28) == Step(concurrency=28)
    assert capped(Step(), 16, 28) == Step()  # 16 at once fit
    assert capped(Step(concurrency=64), 32, 28) == Step(concurrency=28)
    assert capped(Step(concurrency=8), 32, 28) == Step(concurrency=8)
    assert capped(Step(rate=4.0), 32, 28) == Step(rate=4.0, concurrency=28)
    assert capped(Step(), 32, None) == Step()
    rated = capped(Step(rate=4.0), 32, 28)
    assert rated.label == "rate 4/s, concurrency 28"
    assert requests_of(w, rated) == 32  # the same requests, fewer at once
    args = bench_args(w, rated, "http://r:8300", "m", "m", "/tmp/x")
    assert args[args.index("--request-rate") + 1] == "4"
    assert args[args.index("--max-concurrency") + 1] == "28"


def test_the_range_ratio_s_longest_prompt_is_what_is_bounded() -> None:
    assert longest_prompt(Workload(prompt_tokens=1024)) == 1024
    assert longest_prompt(Workload(prompt_tokens=1000, range_ratio=0.25)) == 1250


def test_the_report_and_the_table_say_why(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")
    note = capped_note(Step(), Step(concurrency=28), Workload())
    assert note["asked"] == "all at once" and note["concurrency"] == 28
    assert note["why"].startswith("Mooncake over TCP: at most 28 requests of 1,024 prompt tokens")
    path = ROOT / "tests/bench/data/unbalanced-pd.json"
    report = json.loads(path.read_text())
    report["steps"][0]["capped"] = note
    show(report)
    out = capsys.readouterr().out
    assert "note: asked all at once, sent with at most 28 in flight: Mooncake over TCP" in out


def test_bench_md_tells_it() -> None:
    text = Path(ROOT / "docs/bench.md").read_text()
    assert "sent with at most" in text and "Mooncake over TCP" in text


def test_the_html_report_says_it_under_the_steps_table() -> None:
    from pdctl.report.bench import bench_html

    report = json.loads((H100.parent / "phase2-mooncake-bench/bench.json").read_text())
    page = bench_html(report)
    assert ('<p class="note">concurrency 28: asked all at once, sent with at most 28 in flight: '
            "Mooncake over TCP: at most 28 requests of 1,024 prompt tokens") in page
    del report["steps"][0]["capped"]
    assert "sent with at most" not in bench_html(report)
