"""`pdctl adapters` refusals (before any connection) and `top`'s LoRA line."""

from __future__ import annotations

from types import SimpleNamespace

from pdctl.top.lora import lora_adapters, lora_line
from pdctl.top.metrics import parse
from tests.conftest import run_cli
from tests.helpers import written
from tests.lora.specs import spec_text

KEY = {"apiKey": {"env": "PDCTL_LORA_TEST_KEY"}}


def run(tmp_path, capsys, monkeypatch, text: str, *args: str):
    monkeypatch.delenv("PDCTL_LORA_TEST_KEY", raising=False)
    path = written(tmp_path / "spec.yaml", text)
    code, out, err = run_cli(["adapters", args[0], str(path), *args[1:]], capsys)
    return SimpleNamespace(exit_code=code, output=out + err)


def test_load_without_runtime_loading_is_a_located_error(tmp_path, capsys, monkeypatch) -> None:
    result = run(tmp_path, capsys, monkeypatch, spec_text("phase0", {}), "load", "x", "/srv/x")
    assert result.exit_code == 2
    assert "spec.yaml:" in result.output and "model.lora.runtimeLoading" in result.output
    assert "runtimeLoading: true" in result.output


def test_load_needs_name_and_path(tmp_path, capsys, monkeypatch) -> None:
    text = spec_text("phase0", {"runtimeLoading": True}, secrets=KEY)
    result = run(tmp_path, capsys, monkeypatch, text, "load", "x")
    assert result.exit_code == 2 and "load SPEC NAME PATH" in result.output


def test_the_api_key_must_be_in_the_environment(tmp_path, capsys, monkeypatch) -> None:
    text = spec_text("phase0", {"runtimeLoading": True}, secrets=KEY)
    result = run(tmp_path, capsys, monkeypatch, text, "unload", "x")
    assert result.exit_code == 2 and "$PDCTL_LORA_TEST_KEY is not set" in result.output


def test_kubernetes_is_refused_with_the_way_out(tmp_path, capsys, monkeypatch) -> None:
    result = run(tmp_path, capsys, monkeypatch, spec_text("phase1", {}), "list")
    assert result.exit_code == 2 and "kubectl port-forward" in result.output


def test_the_served_name_is_not_an_adapter_name(tmp_path, capsys, monkeypatch) -> None:
    text = spec_text("phase0", {"runtimeLoading": True}, secrets=KEY)
    result = run(tmp_path, capsys, monkeypatch, text, "unload", "meta-llama/Llama-3.1-8B-Instruct")
    assert result.exit_code == 2 and "served model's name" in result.output


# vllm/v1/metrics/loggers.py sets the gauge to the time for each label set it sees; the
# prometheus client keeps the older label sets, so the newest sample is the current one.


def sample(running: str, waiting: str, at: str) -> str:
    labels = f'max_lora="2",running_lora_adapters="{running}",waiting_lora_adapters="{waiting}"'
    return f"vllm:lora_requests_info{{{labels}}} {at}\n"


METRICS = (
    "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
    "# TYPE vllm:lora_requests_info gauge\n"
    + sample("", "", "1.7640000e+09")
    + sample("sql,chat", "extra", "1.7640012e+09")
    + sample("sql", "", "1.7640006e+09")
)


def test_top_reads_the_newest_lora_sample() -> None:
    found = lora_adapters(parse(METRICS, 0.0))
    assert found == (("chat", "sql"), ("extra",))
    assert lora_line("e-0", found) == "  e-0: running chat, sql; waiting extra"
    assert lora_adapters(parse("vllm:num_requests_running 0\n", 0.0)) is None
