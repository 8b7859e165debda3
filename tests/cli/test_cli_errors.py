"""Bad input -> ONE line on stderr (file:line: field: what; fix) and exit 2, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pdctl.cli.app import main
from tests.helpers import run_cli

GOOD = """\
name: demo
model:
  name: meta-llama/Llama-3.1-8B-Instruct
  maxModelLen: 8192
hosts:
  - name: gpu-a
    address: 192.0.2.10
    gpus: [0, 1, 2, 3]
serve:
  replicas: 2
  tensorParallel: 2
"""

# (case id, spec text, expected start "file:line: path: ...", a phrase in the message)
CASES = [
    ("empty", "", ":1: ", "empty"),
    ("only-comments", "# nothing\n", ":1: ", "no YAML document"),
    ("syntax", "name: demo\nmodel: {name: x\n", ":3: ", "YAML syntax error"),
    ("bad-indent", "name: demo\n  model: x\n", ":2: ", "YAML syntax error"),
    ("top-level-list", "- name: demo\n", ":1: ", "must be a mapping"),
    ("top-level-scalar", "just text\n", ":1: ", "must be a mapping"),
    ("duplicate-key", "name: a\nname: b\nmodel: {name: x}\n", ":2: name: ", "duplicate key"),
    ("missing-model", "name: demo\n", ":1: model: ", "required field is missing"),
    ("missing-name", "model: {name: x}\n", ":1: name: ", "required"),
    ("unknown-top", GOOD + "replicaz: 2\n", ":12: replicaz: ", "did you mean"),
    (
        "typo-serve",
        GOOD.replace("replicas: 2", "replica: 2"),
        ":10: serve.replica: ",
        "did you mean 'replicas'",
    ),
    (
        "typo-host",
        GOOD.replace("address:", "adress:"),
        ":7: hosts[0].adress: ",
        "did you mean 'address'",
    ),
    (
        "model-list",
        GOOD.replace(
            "model:\n  name: meta-llama/Llama-3.1-8B-Instruct\n  maxModelLen: 8192\n",
            "model:\n  - x\n",
        ),
        ":2: model: ",
        "must be a mapping",
    ),
    (
        "hosts-mapping",
        "name: d\nmodel: {name: x}\nhosts: {name: a}\n",
        ":3: hosts: ",
        "must be a list",
    ),
    (
        "replicas-string",
        GOOD.replace("replicas: 2", "replicas: two"),
        ":10: serve.replicas: ",
        "whole number",
    ),
    (
        "replicas-zero",
        GOOD.replace("replicas: 2", "replicas: 0"),
        ":10: serve.replicas: ",
        "must be >= 1",
    ),
    (
        "util-too-high",
        GOOD + "  gpuMemoryUtilization: 1.5\n",
        ":12: serve.gpuMemoryUtilization: ",
        "must be <= 1",
    ),
    ("port-low", GOOD + "  port: 80\n", ":12: serve.port: ", ">= 1024"),
    ("bad-name", GOOD.replace("name: demo", "name: Demo_1"), ":1: name: ", "DNS-1123"),
    (
        "bad-host-name",
        GOOD.replace("name: gpu-a", "name: GPU A"),
        ":6: hosts[0].name: ",
        "DNS-1123",
    ),
    ("bad-phase", GOOD + "phase: 5\n", ":12: phase: ", "must be one of"),
    (
        "bad-runtime",
        GOOD.replace("gpus: [0, 1, 2, 3]", "gpus: [0, 1, 2, 3]\n    runtime: podman"),
        ":9: hosts[0].runtime: ",
        "must be one of",
    ),
    ("bad-version", GOOD + "engine: {version: latest}\n", ":12: engine.version: ", "X.Y.Z"),
    ("old-version", GOOD + "engine: {version: 0.5.0}\n", ":12: engine.version: ", "older"),
    (
        "secret-in-env",
        GOOD + "engine: {env: {HF_TOKEN: abc}}\n",
        ":12: engine.env: ",
        "looks like a secret",
    ),
    ("gpu-repeat", GOOD.replace("[0, 1, 2, 3]", "[0, 0, 1, 2]"), ":8: hosts[0].gpus: ", "repeat"),
    (
        "tp-not-dividing",
        GOOD.replace("[0, 1, 2, 3]", "[0, 1, 2]"),
        ":8: hosts[0].gpus: ",
        "cannot divide",
    ),
    (
        "too-many-gpus",
        GOOD.replace("replicas: 2", "replicas: 3"),
        ":10: serve.replicas: ",
        "needs 2 free GPUs",
    ),
    (
        "host-instances",
        GOOD.replace("gpus: [0, 1, 2, 3]", "gpus: [0, 1, 2, 3]\n    instances: 3"),
        ":9: hosts[0].instances: ",
        "need 6 GPUs",
    ),
    (
        "unknown-flag",
        GOOD + "  extraArgs: [--max-num-seq, '8']\n",
        ":12: serve.extraArgs[0]: ",
        "did you mean '--max-num-seqs'",
    ),
    ("no-serve", GOOD.split("serve:")[0], ":1: serve: ", "needs a `serve` section"),
    ("no-hosts", "name: d\nmodel: {name: x}\nserve: {}\n", ":1: hosts: ", "no hosts"),
    (
        "dup-hosts",
        GOOD.replace("serve:", "  - {name: gpu-a, address: b, gpus: [0, 1]}\nserve:"),
        ":5: hosts: ",
        "used twice",
    ),
    (
        "quantity",
        "name: d\nphase: 1\nmodel: {name: x}\nserve: {}\nkubernetes: {shmSize: lots}\n",
        ":5: kubernetes.shmSize: ",
        "quantity",
    ),
    (
        "claim",
        "name: d\nphase: 1\nmodel: {name: x}\nserve: {}\nkubernetes: {storage: "
        "{type: existingClaim}}\n",
        ":5: kubernetes.storage: ",
        "claimName",
    ),
    (
        "relative-dir",
        GOOD.replace("gpus: [0, 1, 2, 3]", "gpus: [0, 1, 2, 3]\n    dataDir: data"),
        ":9: hosts[0].dataDir: ",
        "absolute",
    ),
    ("bool-type", GOOD + "  enforceEager: maybe\n", ":12: serve.enforceEager: ", "true or false"),
    ("phase0-k8s", GOOD + "target: kubernetes\n", ":12: target: ", "hosts only"),
]


run = run_cli


@pytest.mark.parametrize(("case", "text", "where", "phrase"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("command", ["validate", "render"])
def test_bad_spec_is_one_line_exit_2(
    case: str,
    text: str,
    where: str,
    phrase: str,
    command: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    code, out, err = run([command, str(spec)], capsys)
    assert code == 2, err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {spec}{where}"), lines[0]
    assert phrase in lines[0]
    assert "Traceback" not in err


def test_at_least_25_malformed_cases() -> None:
    assert len(CASES) >= 25


def test_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["validate", "/nonexistent/spec.yaml"], capsys)
    assert code == 2
    assert err.strip() == (
        "error: /nonexistent/spec.yaml: no such file; check the path, or create one with "
        "`pdctl init`"
    )


def test_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["validate", str(tmp_path)], capsys)
    assert code == 2 and "is a directory" in err


def test_bad_phase_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(GOOD)
    code, _, err = run(["render", str(spec), "--phase", "9"], capsys)
    assert code == 2 and err.strip() == "error: --phase must be 0, 1, 2 or 3 (got 9)"


def test_debug_shows_the_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: d\n")
    with pytest.raises(Exception) as info:
        old = sys.argv
        sys.argv = ["pdctl", "--debug", "validate", str(spec)]
        try:
            main()
        finally:
            sys.argv = old
    assert "model" in str(info.value)


def test_render_output_dir_is_not_half_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(GOOD.replace("replicas: 2", "replicas: 9"))
    out = tmp_path / "out"
    code, _, _ = run(["render", str(spec), "--output-dir", str(out)], capsys)
    assert code == 2
    assert not out.exists()
