"""The review's spec findings (s21: 1, 2, 10, 12, 14, 19): each refused as ONE line
`file:line: field.path: what; fix`, exit 2; what vLLM or the shell would take is accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_cli_errors import GOOD
from tests.conftest import ROOT
from tests.helpers import run_cli

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

PD = """\
name: demo
phase: 2
model: {name: Qwen/Qwen2.5-7B-Instruct, maxModelLen: 8192}
hosts:
  - {name: gpu-a, address: 192.0.2.10, gpus: [0, 1]}
  - {name: gpu-b, address: 192.0.2.11, gpus: [0, 1]}
prefill: {replicas: 1}
decode: {replicas: 1}
disaggregation: {connector: mooncake, protocol: rdma, deviceName: "mlx5_0"}
"""

MULTINODE = (ROOT / "examples" / "phase0-multinode.yaml").read_text()

# (case id, spec text, expected start "file:line: path: ", phrases in the line)
CASES = [
    # 1: maxModelLen past the model's derived length (Llama-3.1-8B: 131072 in pdctl's table)
    (
        "max-model-len-long",
        GOOD.replace("maxModelLen: 8192", "maxModelLen: 200000"),
        ":4: model.maxModelLen: ",
        ["131072", "VLLM_ALLOW_LONG_MAX_MODEL_LEN: '1'"],
    ),
    # 2: YAML booleans where numbers are expected
    (
        "bool-replicas",
        GOOD.replace("replicas: 2", "replicas: yes"),
        ":10: serve.replicas: ",
        ["must be a whole number", "boolean"],
    ),
    (
        "bool-tp",
        GOOD.replace("tensorParallel: 2", "tensorParallel: true"),
        ":11: serve.tensorParallel: ",
        ["must be a whole number"],
    ),
    (
        "bool-util",
        GOOD + "  gpuMemoryUtilization: on\n",
        ":12: serve.gpuMemoryUtilization: ",
        ["must be a number", "boolean"],
    ),
    (
        "bool-gpus",
        GOOD.replace("gpus: [0, 1, 2, 3]", "gpus: [false, true, 2, 3]"),
        ":8: hosts[0].gpus: ",
        ["entry 0 must be a whole number", "boolean (false)"],
    ),
    ("bool-port", GOOD + "  port: true\n", ":12: serve.port: ", ["whole number"]),
    (
        "bool-phase",
        GOOD + "phase: true\n",
        ":12: phase: ",
        ["must be one of 0, 1, 2, 3", "boolean"],
    ),
    # 12: a pattern mismatch says what the value is and how to write it
    (
        "interface-pattern",
        GOOD.replace(
            "    gpus: [0, 1, 2, 3]\n", "    gpus: [0, 1, 2, 3]\n    networkInterface: 'eth0;id'\n"
        ),
        ":9: hosts[0].networkInterface: ",
        ["interface name", "15 characters", "'eth0;id'"],
    ),
    # 19: variables that break start.sh or that pdctl sets
    *[
        (
            f"env-{name}",
            GOOD + f"engine:\n  env: {{{name}: /x}}\n",
            f":13: engine.env.{name}: ",
            [name],
        )
        for name in ("PATH", "BASH_ENV", "LD_PRELOAD")
    ],
    *[
        (
            f"group-env-{name}",
            MULTINODE.replace(
                '  version: "0.33.0"\n', f'  version: "0.33.0"\n  env: {{{name}: x}}\n'
            ),
            ":13: engine.env: ",
            [name, field],
        )
        for name, field in (
            ("VLLM_HOST_IP", "addressForPeers"),
            ("NCCL_SOCKET_IFNAME", "networkInterface"),
            ("NCCL_IB_HCA", "rdmaDevices"),
        )
    ],
    (
        "role-env-path",
        PD.replace("prefill: {replicas: 1}", "prefill: {replicas: 1, env: {PATH: /x}}"),
        ":7: prefill.env.PATH: ",
        ["PATH"],
    ),
    (
        "device-name-empty",
        PD.replace('deviceName: "mlx5_0"', 'deviceName: "mlx5_0,,"'),
        ":9: disaggregation.deviceName: ",
        ["empty", "mlx5_0"],
    ),
    (
        "peers-twice",
        PD.replace(
            "gpus: [0, 1]}\n  - {name: gpu-b",
            "gpus: [0, 1], addressForPeers: 10.0.0.5}\n  - {name: gpu-b, addressForPeers: 10.0.0.5",
        ).replace("\n\n", "\n"),
        ":6: hosts[1].addressForPeers: ",
        ["gpu-a", "10.0.0.5"],
    ),
    (
        "peers-is-other-address",
        PD.replace("192.0.2.11, gpus", "192.0.2.11, addressForPeers: 192.0.2.10, gpus"),
        ":6: hosts[1].addressForPeers: ",
        ["gpu-a"],
    ),
    (
        "image-upper-case",
        GOOD + "engine: {image: Vllm/vllm-openai:v0.33.0}\n",
        ":12: engine.image: ",
        ["lower-case", "repository"],
    ),
    (
        "image-space",
        GOOD + "engine: {image: 'vllm/vllm openai:v1'}\n",
        ":12: engine.image: ",
        ["image reference"],
    ),
    (
        "image-empty-tag",
        GOOD + "engine: {image: 'vllm/vllm-openai:'}\n",
        ":12: engine.image: ",
        ["image reference"],
    ),
]


@pytest.mark.parametrize(("case", "text", "where", "phrases"), CASES, ids=[c[0] for c in CASES])
def test_refused_in_one_line(
    case: str,
    text: str,
    where: str,
    phrases: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    code, out, err = run_cli(["validate", str(spec)], capsys)
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {spec}{where}"), lines[0]
    assert "; " in lines[0], lines[0]  # a fix follows
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    assert "String should match" not in lines[0]


ACCEPTED = [
    ("max-model-len-at-limit", GOOD.replace("maxModelLen: 8192", "maxModelLen: 131072")),
    (
        "max-model-len-allowed-long",
        GOOD.replace("maxModelLen: 8192", "maxModelLen: 200000")
        + "engine:\n  env: {VLLM_ALLOW_LONG_MAX_MODEL_LEN: '1'}\n",
    ),
    (
        "max-model-len-unknown-model",
        GOOD.replace("meta-llama/Llama-3.1-8B-Instruct", "acme/Unknown-13B").replace(
            "maxModelLen: 8192", "maxModelLen: 900000"
        ),
    ),
    ("int-for-float", GOOD + "  gpuMemoryUtilization: 1\n"),
    (
        "image-digest",
        GOOD + "engine: {image: 'registry.example.com:5000/vllm/x@sha256:" + "a" * 64 + "'}\n",
    ),
    (
        "image-upper-registry",
        GOOD + "engine: {image: 'Registry.Example.com/vllm/vllm-openai:V1'}\n",
    ),
    ("device-names", PD.replace('deviceName: "mlx5_0"', 'deviceName: "mlx5_0,mlx5_1"')),
    ("env-other", GOOD + "engine:\n  env: {VLLM_LOGGING_LEVEL: DEBUG, NCCL_DEBUG: INFO}\n"),
]


@pytest.mark.parametrize(("case", "text"), ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_accepted(case: str, text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    code, out, err = run_cli(["validate", str(spec)], capsys)
    assert code == 0, err


def _config(tmp_path: Path, **extra: object) -> str:
    config = {
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        **extra,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    return "config.json"


@pytest.mark.parametrize(
    ("extra", "limit"),
    [
        ({"max_position_embeddings": 32768, "n_positions": 4096}, 4096),  # the smallest key
        ({"seq_length": 16384}, 16384),
        ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4}}, 16384),
        (
            {
                "max_position_embeddings": 131072,
                "rope_scaling": {
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 32768,
                },
            },
            131072,
        ),
        (
            {"max_position_embeddings": 8192, "rope_scaling": {"rope_type": "llama3", "factor": 8}},
            8192,
        ),
        ({"max_position_embeddings": 2048, "model_max_length": 8192}, 8192),
        ({}, 2048),  # no key: vLLM assumes 2048 only when maxModelLen is unset; it takes ours
    ],
)
def test_model_config_limit(
    extra: dict, limit: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = _config(tmp_path, **extra)
    base = GOOD.replace("maxModelLen: 8192", "config: " + ref + "\n  maxModelLen: {n}")
    spec = tmp_path / "spec.yaml"
    spec.write_text(base.format(n=limit))
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


def test_top_level_volume_mount_is_named_where_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(PHASE1)
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
    code, _, err = run_cli(["validate", str(spec)], capsys)
    assert code == 2, err
    assert err.startswith(f"error: {spec}:7: kubernetes.volumeMounts"), err
    assert "/dev/shm" in err
    # a role's own mount is still named at the role
    spec.write_text(
        PHASE1.replace("  volumeMounts:\n    - {name: nope, mountPath: /data}\n", "")
        + "  kubernetes:\n    volumeMounts: [{name: nope, mountPath: /data}]\n"
    )
    code, _, err = run_cli(["validate", str(spec)], capsys)
    assert code == 2, err
    assert f"{spec}:9: serve.kubernetes.volumeMounts" in err, err


def test_empty_overlay_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(GOOD)
    for text in ("", "# only a comment\n"):
        over = tmp_path / "prod.yaml"
        over.write_text(text)
        code, out, err = run_cli(["validate", str(spec), "--overlay", str(over)], capsys)
        assert code == 2, err
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
    code, out, err = run_cli(["explain", "hosts[0].gpus"], capsys)
    assert code == 0, err
    code, out, err = run_cli(["explain", "hosts[].gpus"], capsys)
    assert code == 0, err


def test_schema_keeps_numbers_and_pattern(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["schema"], capsys)
    assert code == 0
    text = json.dumps(json.loads(out))
    assert "^[A-Za-z0-9_.:-]{1,15}$" in text
    schema = json.loads(out)
    serve = schema["$defs"]["Serve"]["properties"]
    assert serve["replicas"]["type"] == "integer"


@pytest.mark.parametrize("command", ["plan", "render", "validate"])
def test_long_max_model_len_refused_by_every_command(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(GOOD.replace("maxModelLen: 8192", "maxModelLen: 200000"))
    code, out, err = run_cli([command, str(spec)], capsys)
    assert code == 2, (out, err)
    assert len(err.splitlines()) == 1 and f"{spec}:4: model.maxModelLen: " in err, err
