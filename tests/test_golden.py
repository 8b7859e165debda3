"""Golden files: every example renders to exactly the reviewed bytes.

`pytest tests/test_golden.py --update-golden` (or `nox -s golden`) rewrites them; review the
diff like code."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text
from tests.conftest import EXAMPLES, ROOT

GOLDEN = ROOT / "tests" / "golden"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_matches_golden(example: Path, update_golden: bool) -> None:
    spec, _ = load_text(example.read_text(), example.name)
    stream = render(make_plan(spec)).stream()
    golden = GOLDEN / f"{example.stem}.txt"
    if update_golden:
        golden.write_text(stream)
        return
    assert golden.exists(), f"no golden file for {example.name}: run pytest --update-golden"
    assert stream == golden.read_text(), f"{example.name} renders differently from {golden.name}"


def test_every_golden_has_an_example() -> None:
    stems = {p.stem for p in EXAMPLES}
    orphans = [g.name for g in GOLDEN.glob("*.txt") if g.stem not in stems]
    assert not orphans, f"golden files without an example: {orphans}"


OVERLAY_EXAMPLES = sorted((ROOT / "examples" / "overlays").glob("*.yaml"))


@pytest.mark.parametrize("example", OVERLAY_EXAMPLES, ids=lambda p: p.stem)
def test_overlay_example_matches_golden(example: Path, update_golden: bool) -> None:
    """examples/overlays/: base.yaml alone, and base.yaml with each other file as overlay."""
    from pdctl.spec.load import load_data
    from pdctl.spec.overlay import merge
    from pdctl.spec.source import parse

    base = example.parent / "base.yaml"
    files = [base] if example == base else [base, example]
    data, source = merge(*(parse(f.read_text(), f.name) for f in files))
    stream = render(make_plan(load_data(data, source))).stream()
    golden = GOLDEN / "overlays" / f"{example.stem}.txt"
    if update_golden:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(stream)
        return
    assert golden.exists(), f"no golden file for overlays/{example.name}: pytest --update-golden"
    assert stream == golden.read_text(), f"overlays/{example.name} renders differently"
