"""The review's spec findings (s21: 1, 2, 10, 12, 14, 19): each refused as ONE line
`file:line: field.path: what; fix`, exit 2; what vLLM or the shell would take is accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cli.test_cli_errors import GOOD
from tests.conftest import ROOT
from tests.helpers import cli, data, run_cli, written

PHASE1 = """\
name: demo
phase: 1
model: {name: meta-llama/Llama-3.1-8B-Instruct, maxModelLen: 8192}
kubernetes:
  namespace: vllm-inference
  volumeMounts:
    - {name: nope, mountPath: /data}
serve:
  replicas: 1
"""

TABLE = data("spec_review.yaml")
BASES = {
    "good": GOOD, "pd": TABLE["pd"],
    "multinode": (ROOT / "examples" / "phase0-multinode.yaml").read_text(),
}


def text_of(case: dict) -> str:
    """The case's spec: its base with `replace` done and `add` appended, or its `text`."""
    if "text" in case:
        return case["text"]
    base = BASES[case["base"]]
    return (base.replace(*case["replace"]) if "replace" in case else base) + case.get("add", "")


CASES = [(c["id"], text_of(c), c["where"], c["phrases"]) for c in TABLE["refused"]]
ACCEPTED = [(c["id"], text_of(c)) for c in TABLE["accepted"]]


@pytest.mark.parametrize(("case", "text", "where", "phrases"), CASES, ids=[c[0] for c in CASES])
def test_refused_in_one_line(
    case: str, text: str, where: str, phrases: list[str], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = written(tmp_path / "spec.yaml", text)
    out, err = cli(["validate", str(spec)], 2)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {spec}{where}"), lines[0]
    assert "; " in lines[0], lines[0]  # a fix follows
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    assert "String should match" not in lines[0]


@pytest.mark.parametrize(("case", "text"), ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_accepted(case: str, text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = written(tmp_path / "spec.yaml", text)
    out, err = cli(["validate", str(spec)])


def _config(tmp_path: Path, **extra: object) -> str:
    config = {
        "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, **extra,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    return "config.json"

LIMITS = yaml.safe_load((Path(__file__).parent / "data" / "config-limits.yaml").read_text())


@pytest.mark.parametrize(
    ("extra", "limit"), [(c["extra"], c["limit"]) for c in LIMITS]
)
def test_model_config_limit(extra: dict, limit: int, tmp_path, capsys) -> None:
    ref = _config(tmp_path, **extra)
    base = GOOD.replace("maxModelLen: 8192", "config: " + ref + "\n  maxModelLen: {n}")
    spec = written(tmp_path / "spec.yaml", base.format(n=limit))
    code, _, err = run_cli(["validate", str(spec)], capsys)
    assert code == 0, err
    spec.write_text(base.format(n=limit + 1))
    code, _, err = run_cli(["validate", str(spec)], capsys)
    if not extra:
        assert code == 0, err  # vLLM uses the given length when the config names none
        return
    assert code == 2, err
    assert f"{spec}:5: model.maxModelLen: " in err and f"{limit} tokens" in err, err
    assert "model.config" in err


def test_top_level_volume_mount_is_named_where_written(tmp_path, capsys) -> None:
    spec = written(tmp_path / "spec.yaml", PHASE1)
    code, _, err = run_cli(["validate", str(spec)], capsys)
    assert code == 2, err
    assert err.startswith(f"error: {spec}:6: kubernetes.volumeMounts"), err
    assert "'nope'" in err
    shm = PHASE1.replace(
        "  volumeMounts:\n    - {name: nope, mountPath: /data}\n",
        "  volumes: [{name: scratch, emptyDir: {}}]\n"
        "  volumeMounts:\n    - {name: scratch, mountPath: /dev/shm}\n",
    )
    spec.write_text(shm)
    _, err = cli(["validate", str(spec)], 2)
    assert err.startswith(f"error: {spec}:7: kubernetes.volumeMounts"), err
    assert "/dev/shm" in err
    # a role's own mount is still named at the role
    spec.write_text(
        PHASE1.replace("  volumeMounts:\n    - {name: nope, mountPath: /data}\n", "")
        + "  kubernetes:\n    volumeMounts: [{name: nope, mountPath: /data}]\n"
    )
    _, err = cli(["validate", str(spec)], 2)
    assert f"{spec}:9: serve.kubernetes.volumeMounts" in err, err


def test_empty_overlay_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = written(tmp_path / "spec.yaml", GOOD)
    for text in ("", "# only a comment\n"):
        over = written(tmp_path / "prod.yaml", text)
        out, err = cli(["validate", str(spec), "--overlay", str(over)], 2)
        lines = err.splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith(f"error: {over}:1: "), err
        assert "overlay is empty" in lines[0] and "spec is empty" not in lines[0], err


@pytest.mark.parametrize("path", ["hosts[x]", "hosts[0", "hosts[0]x.gpus", "serve..replicas"])
def test_explain_bad_path(path: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["explain", path], capsys)
    assert code == 2, (out, err)
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert "hosts[0].gpus" in err, err


def test_explain_indexed_path_still_works(capsys: pytest.CaptureFixture[str]) -> None:
    out, err = cli(["explain", "hosts[0].gpus"])
    out, err = cli(["explain", "hosts[].gpus"])


def test_schema_keeps_numbers_and_pattern(capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = cli(["schema"])
    text = json.dumps(json.loads(out))
    assert "^[A-Za-z0-9_.:-]{1,15}$" in text
    schema = json.loads(out)
    serve = schema["$defs"]["Serve"]["properties"]
    assert serve["replicas"]["type"] == "integer"


@pytest.mark.parametrize("command", ["plan", "render", "validate"])
def test_long_max_model_len_refused_by_every_command(command: str, tmp_path, capsys) -> None:
    spec = written(tmp_path / "spec.yaml", GOOD.replace("maxModelLen: 8192", "maxModelLen: 200000"))
    code, out, err = run_cli([command, str(spec)], capsys)
    assert code == 2, (out, err)
    assert len(err.splitlines()) == 1 and f"{spec}:4: model.maxModelLen: " in err, err
