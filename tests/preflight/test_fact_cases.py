"""The fact parsers over recorded real outputs, as data (pyinfra's tests/facts/<fact>/*.json):
tests/preflight/facts/<parser>/<case>.json holds the input (`input`: a file under
tests/fixtures/gpu, or `text`) and the parser's whole `output` as JSON (a dataclass as an
object, a tuple as a list). A new recording is a new case file, not a new test."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from pdctl.preflight import cluster, gpu, host
from tests.preflight.conftest import FIX

CASES = Path(__file__).resolve().parent / "facts"
PARSERS = {
    name: getattr(module, name)
    for module in (cluster, gpu, host)
    for name in dir(module)
    if name.startswith("parse_")
}


def plain(value: Any) -> Any:
    """`value` as JSON data: dataclasses as objects, tuples as lists, keys as strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


@pytest.mark.parametrize(
    "case", sorted(CASES.glob("*/*.json")), ids=lambda p: f"{p.parent.name}/{p.stem}"
)
def test_parser_case(case: Path) -> None:
    data = json.loads(case.read_text())
    text = (FIX / data["input"]).read_text() if "input" in data else data["text"]
    assert plain(PARSERS[case.parent.name](text)) == data["output"]
