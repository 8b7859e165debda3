"""A saved bench report keeps matching its spec after pdctl adds a field with a default:
specHash digests only the fields the user set."""

from __future__ import annotations

from pathlib import Path

from pydantic import create_model

from pdctl.bench.report import SPEC_HASH_OF, legacy_spec_hash, spec_hash, spec_match
from pdctl.cli.specfile import read_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests/fixtures/gpu/vllm023-h200/bench/spec.yaml"


def test_a_new_field_with_a_default_leaves_the_hash() -> None:
    spec, _ = read_spec(str(SPEC))
    later = create_model("LaterSpec", __base__=type(spec), future_knob=(int, 3))
    upgraded = later.model_validate(spec.model_dump(by_alias=True, exclude_unset=True))
    assert spec_hash(upgraded) == spec_hash(spec)
    assert legacy_spec_hash(upgraded) != legacy_spec_hash(spec)  # what went wrong before


def test_reports_match_by_their_own_kind_of_hash() -> None:
    spec, _ = read_spec(str(SPEC))
    new = {"specHash": spec_hash(spec), "specHashOf": SPEC_HASH_OF}
    assert spec_match(new, spec) == (True, "")
    ok, note = spec_match({**new, "specHash": "0" * 16}, spec)
    assert not ok and "measured on another spec" in note
    assert spec_match({"specHash": legacy_spec_hash(spec)}, spec) == (True, "")
    ok, note = spec_match({"specHash": "a28da9f6c0a6c458"}, spec)  # the saved H200 report
    assert not ok and "predates" in note and "another spec" not in note


def test_tune_says_an_older_report_predates_the_hash_not_that_its_spec_differs() -> None:
    """`pdctl tune` on the committed H200 report and the spec it was measured on."""
    import json

    from typer.testing import CliRunner

    from pdctl.cli.app import app

    report = SPEC.parent / "bench.json"
    ran = CliRunner().invoke(app, ["tune", str(SPEC), "--from", str(report)])
    assert ran.exit_code == 0, ran.output
    text = " ".join(ran.output.split())
    assert "predates pdctl's spec hash" in text and "another spec" not in text
    ran = CliRunner().invoke(app, ["tune", str(SPEC), "--from", str(report), "-o", "json"])
    assert json.loads(ran.stdout)["specMatchesReport"] is False
