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
from tests.helpers import checked

GOLDEN = ROOT / "tests" / "golden"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_matches_golden(example: Path, update_golden: bool) -> None:
    spec, _ = load_text(example.read_text(), example.name)
    _check_golden(render(make_plan(spec)).stream(), GOLDEN / f"{example.stem}.txt", update_golden)


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
    _check_golden(stream, GOLDEN / "overlays" / f"{example.stem}.txt", update_golden)


PLAN_GOLDEN = GOLDEN / "plan"
NARROW = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}


def _plan_at_80(example: Path, *options: str) -> str:
    from tests.helpers import pdctl

    proc = checked(pdctl("plan", str(example.relative_to(ROOT)), *options, env=NARROW))
    return proc.stdout


def _check_golden(text: str, golden: Path, update: bool) -> None:
    if update:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
        return
    where = golden.relative_to(GOLDEN)
    assert golden.exists(), f"no golden file {where}: run pytest --update-golden"
    assert text == golden.read_text(), f"the output differs from tests/golden/{where}"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_plan_table_at_80_columns_matches_golden(example: Path, update_golden: bool) -> None:
    """`pdctl plan` at COLUMNS=80: the compact table, no "how" column, no table line wider
    than 80 columns and no label cut (the advice prose wraps as text does)."""
    out = _plan_at_80(example)
    table = out.split("how each figure is made")[0]
    assert "how" not in table.split("\n", 3)[-1], "the compact table has a 'how' column"
    assert all(len(line) <= 80 for line in table.splitlines()), table
    assert "…" not in table, table
    _check_golden(out, PLAN_GOLDEN / f"{example.stem}.txt", update_golden)


@pytest.mark.parametrize("stem", ["phase0-conda", "phase2-wide-ep"])
def test_plan_wide_at_80_columns_matches_golden(stem: str, update_golden: bool) -> None:
    """`pdctl plan -o wide`: the table with the "how" column (wrapped at 80 columns)."""
    out = _plan_at_80(ROOT / "examples" / f"{stem}.yaml", "-o", "wide")
    assert "how" in out.split("\n")[4] and "tensorParallel" in out, out
    _check_golden(out, PLAN_GOLDEN / f"{stem}.wide.txt", update_golden)


def test_every_plan_golden_has_an_example() -> None:
    stems = {p.stem for p in EXAMPLES}
    orphans = [
        g.name for g in PLAN_GOLDEN.glob("*.txt") if g.name.split(".")[0] not in stems
    ]
    assert not orphans, f"plan golden files without an example: {orphans}"
