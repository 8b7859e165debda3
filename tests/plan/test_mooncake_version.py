"""Mooncake on a vLLM whose decode strands a request after a failed KV pull (issue 36): up to
0.29.0 the MooncakeConnector only logs the failure, so the request waits for good holding its
KV blocks (vllm#50719; vLLM PR #50984, first released in 0.30.0). validate/render warn at
engine.version and --strict refuses; 0.30.0 and later, and the other connectors, pass quietly."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers import cli, plan_of, run_cli, written

MOONCAKE = (ROOT / "examples/phase2-mooncake-tcp.yaml").read_text()
NIXL = (ROOT / "examples/phase2-nixl-hosts.yaml").read_text()
STORE = (ROOT / "examples/phase2-mooncake-store.yaml").read_text()


def pinned(text: str, version: str) -> str:
    assert 'version: "0.33.0"' in text
    return text.replace('version: "0.33.0"', f'version: "{version}"', 1)


@pytest.mark.parametrize("version", ["0.23.0", "0.29.0"])
@pytest.mark.parametrize("example", [MOONCAKE, STORE], ids=["direct", "store"])
def test_mooncake_before_0_30_is_a_caution_at_engine_version(example: str, version: str) -> None:
    (caution,) = plan_of(pinned(example, version)).cautions
    assert caution.path == "engine.version"
    assert f"vLLM {version}'s MooncakeConnector" in caution.message
    assert "vllm#50719" in caution.message and "0.30.0" in caution.message
    assert "0.30.0 or later" in caution.fix and "nixl" in caution.fix


@pytest.mark.parametrize("version", ["0.30.0", "0.33.0"])
def test_mooncake_from_0_30_has_no_caution(version: str) -> None:
    assert plan_of(pinned(MOONCAKE, version)).cautions == ()


def test_other_connectors_on_an_old_vllm_have_none() -> None:
    assert plan_of(pinned(NIXL, "0.23.0")).cautions == ()


def test_validate_locates_it_and_strict_refuses_before_anything_is_written(
    tmp_path: Path,
) -> None:
    text = pinned(MOONCAKE, "0.23.0")
    spec = written(tmp_path / "spec.yaml", text)
    line_no = text.splitlines().index('  version: "0.23.0"') + 1
    out, err = cli(["validate", str(spec)])
    assert "ok: qwen-mooncake" in out
    (warning,) = [w for w in err.splitlines() if "warning" in w]
    assert warning.startswith(f"{spec}:{line_no}: warning: engine.version: vLLM 0.23.0's ")
    for cmd in ("validate", "render"):
        code, out, err = run_cli([cmd, str(spec), "--strict"])
        assert code == 1 and out == ""
        assert "refused (--strict): a setting may not work where it runs" in err
