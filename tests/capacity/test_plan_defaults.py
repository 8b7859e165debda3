"""Defaults the user did not write adapt to the spec and say so; only what the user wrote
is an error: the default request length, and a GPU name that leaves the memory open."""

from __future__ import annotations

import json
from pathlib import Path

from pdctl.capacity.gpus import ambiguous, find_gpu
from tests.capacity.conftest import serve_spec
from tests.helpers import cli, written
from tests.helpers import run_cli as run


def short(workload: str = "") -> str:
    return serve_spec("Qwen/Qwen3-8B", 1024, head="hardware: {gpu: H100}\n", tail=workload)


def _write(tmp_path: Path, text: str) -> str:
    path = written(tmp_path / "s.yaml", text)
    return str(path)


def test_the_default_workload_adapts_to_a_short_max_model_len(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, short())
    code, out, err = run(["plan", path], capsys)
    assert code == 0, err
    assert "the default request (1,024 prompt + 256 output tokens) is longer than" in out
    code, out, _ = run(["plan", path, "-o", "json"], capsys)
    data = json.loads(out)
    traffic = data["traffic"]
    assert traffic["promptTokens"] + traffic["outputTokens"] <= 1024
    assert any("default request" in w for w in data["warnings"])


def test_a_written_output_keeps_and_the_prompt_adapts(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, short("workload: {outputTokens: 100}\n"))
    out, err = cli(["plan", path, "-o", "json"])
    traffic = json.loads(out)["traffic"]
    assert (traffic["promptTokens"], traffic["outputTokens"]) == (924, 100)


def test_a_written_workload_that_is_too_long_is_still_an_error(tmp_path: Path, capsys) -> None:
    text = short("workload: {promptTokens: 1000, outputTokens: 100}\n")
    code, _, err = run(["plan", _write(tmp_path, text)], capsys)
    assert code == 2 and "workload.promptTokens" in err
    code, _, err = run(
        ["plan", _write(tmp_path, short()), "--prompt-tokens", "2000"], capsys
    )
    assert code == 2 and "--prompt-tokens" in err


def test_a100_without_its_memory_is_the_smaller_and_says_so(tmp_path: Path, capsys) -> None:
    assert find_gpu("A100").name == "A100-40GB"
    assert find_gpu("NVIDIA A100-SXM4-80GB").name == "A100-80GB"
    assert find_gpu("NVIDIA A100 80GB PCIe").name == "A100-80GB"
    assert not ambiguous("A100-80GB") and ambiguous("a100")
    path = _write(tmp_path, short().replace("gpu: H100", "gpu: A100"))
    out, err = cli(["plan", path, "-o", "json"])
    data = json.loads(out)
    assert data["gpu"]["name"] == "A100-40GB"
    assert any("planned for the smaller, A100-40GB" in w for w in data["warnings"])
