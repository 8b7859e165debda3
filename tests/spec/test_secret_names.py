"""Secret-looking names in `engine.env` (whole words of the name, not substrings) and secret
values pasted where a reference belongs: refused in one line that never shows the value."""

from __future__ import annotations

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
