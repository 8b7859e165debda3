"""`pdctl schema` has a stable `$id`; `pdctl init` writes the yaml-language-server modeline
that points editors at it (docs/spec.md, "Editor support")."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from pdctl import __version__
from tests.helpers import cli, run_cli


def test_schema_has_a_stable_id(capsys) -> None:
    code, first, _ = run_cli(["schema"], capsys)
    assert code == 0
    code, second, _ = run_cli(["schema"], capsys)
    assert first == second
    schema = json.loads(first)
    assert schema["$id"] == f"https://pdctl.example/schema/spec-{__version__}.json"
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("phase", [0, 1, 2, 3])
def test_init_points_editors_at_the_schema(phase: int, capsys) -> None:
    code, text, _ = run_cli(["init", "--phase", str(phase)], capsys)
    assert code == 0
    assert text.splitlines()[0] == "# yaml-language-server: $schema=pdctl-spec.schema.json"
    # What the modeline points at, written as the second line says, accepts the spec.
    code, schema, _ = run_cli(["schema"], capsys)
    jsonschema.Draft202012Validator(json.loads(schema)).validate(yaml.safe_load(text))


def test_init_schema_ref(tmp_path: Path, capsys) -> None:
    ref = "https://schemas.example/pdctl/spec-0.1.0.json"
    out = tmp_path / "spec.yaml"
    _, err = cli(["init", "--schema", ref, "-o", str(out)])
    assert out.read_text().splitlines()[0] == f"# yaml-language-server: $schema={ref}"


def test_init_schema_ref_is_one_line(capsys) -> None:
    code, out, err = run_cli(["init", "--schema", "a\nrm -rf x"], capsys)
    assert code == 2 and not out
    assert err == "error: --schema must be one line: a path or a URL\n"
