"""Secret-looking names in `engine.env` (whole words of the name, not substrings) and secret
values pasted where a reference belongs: refused in one line that never shows the value."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pdctl.spec.value import secret_like
from tests.cli.test_cli_errors import GOOD
from tests.helpers import cli, written


def _validate(tmp_path: Path, add: str, code: int) -> str:
    spec = written(tmp_path / "spec.yaml", GOOD + add)
    out, err = cli(["validate", str(spec)], code)
    return err


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TOKENIZERS_PARALLELISM", "false"),
        ("HF_HUB_DISABLE_TOKEN", "1"),
        ("HF_HUB_DISABLE_TOKEN", "True"),
        ("VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE", "4096"),
        ("MAX_TOKENS", "512"),
        ("KEYPAIR_PATH", "/etc/x"),
    ],
)
def test_engine_env_names_that_are_no_secret_pass(
    tmp_path: Path, name: str, value: str
) -> None:
    _validate(tmp_path, f"engine: {{env: {{{name}: '{value}'}}}}\n", 0)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HF_TOKEN", "hf_abc"), ("WANDB_API_KEY", "x"), ("MY_SECRET", "x"),
        ("DB_PASSWORD", "hunter2"), ("AWS_SECRET_ACCESS_KEY", "abc"),
        ("AWS_ACCESS_KEY_ID", "AKIA1"), ("SSH_PRIVATE_KEY", "k"), ("OPENAI_APIKEY", "k"),
        ("GCP_CREDENTIALS", "{}"), ("MYSQL_PASSWD", "p"),
    ],
)
def test_engine_env_secret_names_are_refused(tmp_path: Path, name: str, value: str) -> None:
    err = _validate(tmp_path, f"engine: {{env: {{{name}: '{value}'}}}}\n", 2)
    assert len(err.splitlines()) == 1, err
    assert "engine.env" in err and name in err and "looks like a secret" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True), ("hfToken", True), ("apiKey", True), ("secretKey", True),
        ("TOKENIZERS_PARALLELISM", False), ("VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE", False),
        ("maxNumBatchedTokens", False), ("KEY", False), ("API", False),
    ],
)
def test_secret_like_matches_whole_words(name: str, secret: bool) -> None:
    assert secret_like(name) is secret


TOKEN = "sk-proj-abcdefghijklmnop"


@pytest.mark.parametrize(
    ("add", "where", "phrases"),
    [
        (f"secrets: {{apiKey: {TOKEN}}}\n", ":12: secrets.apiKey: ",
         ["must be a reference, not the value itself", "not shown", "{env: VLLM_API_KEY}",
          "secretName"]),
        ("secrets: {hfToken: hf_abcdefghijklmnop}\n", ":12: secrets.hfToken: ",
         ["must be a reference", "{env: HF_TOKEN}"]),
        ("secrets: {hfToken: 1234567890}\n", ":12: secrets.hfToken: ",
         ["got a number, not shown"]),
        ("secrets: hf_abcdefghijklmnop\n", ":12: secrets: ", ["not shown", "{env: HF_TOKEN}"]),
        ("secrets: {hfToken: {env: hf_AbCdEf1234567890}}\n", ":12: secrets.hfToken.env: ",
         ["looks like the token itself", "not shown"]),
        (f"secrets: {{apiKey: {{env: {TOKEN}}}}}\n", ":12: secrets.apiKey.env: ",
         ["looks like the token itself"]),
        ("secrets: {apiKey: {env: AbCdEfGhIjKlMnOp12345}}\n", ":12: secrets.apiKey.env: ",
         ["looks like the token itself"]),
        ("secrets: {apiKey: {env: K, secretName: Abc_defghij}}\n",
         ":12: secrets.apiKey.secretName: ", ["(not shown) is not a DNS-1123 label"]),
        ("engine: {env: {HF_TOKEN: 1234567}}\n", ":12: engine.env.HF_TOKEN: ",
         ["got a number, not shown"]),
    ],
)
def test_secret_values_are_never_shown(
    tmp_path: Path, add: str, where: str, phrases: list[str]
) -> None:
    spec = written(tmp_path / "spec.yaml", GOOD + add)
    _, err = cli(["validate", str(spec)], 2)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {spec}{where}"), lines[0]
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    names = {"secrets", "engine", "hfToken", "apiKey", "secretName", "HF_TOKEN"}
    for value in set(re.findall(r"[\w-]{6,}", add)) - names:
        assert value not in lines[0], lines[0]


@pytest.mark.parametrize(
    "name",
    ["HF_TOKEN", "VLLM_API_KEY", "MY_HF_TOKEN_2", "hf_token_file", "hf_token_for_gated_models",
     "HF_TOKEN_FOR_CLUSTER_2026", "HfTokenOfTheTeamTwo"],
)
def test_secret_reference_names_pass(tmp_path: Path, name: str) -> None:
    _validate(tmp_path, f"secrets: {{hfToken: {{env: {name}}}}}\n", 0)
