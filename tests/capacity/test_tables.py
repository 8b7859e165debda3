"""The shipped data tables (pdctl/data/models.yaml, gpus.yaml): a malformed entry is refused
with one line naming the file and the entry, never a traceback from deep in the planner."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pdctl.capacity import gpus, models
from pdctl.capacity.tables import TableError
from tests.helpers import written

DATA = Path(models.__file__).resolve().parents[1] / "data"

MALFORMED = yaml.safe_load((Path(__file__).parent / "data" / "malformed-tables.yaml").read_text())


@pytest.mark.parametrize(
    ("table", "old", "new", "error"),
    [(c["table"], c["old"], c["new"], c["error"]) for c in MALFORMED],
    ids=[c["id"] for c in MALFORMED],
)
def test_a_malformed_entry_names_the_file_and_the_entry(
    tmp_path: Path, table: str, old: str, new: str, error: str
) -> None:
    text = (DATA / table).read_text()
    assert text.count(old) == 1, old
    bad = written(tmp_path / table, text.replace(old, new))
    load = models.load_table if table == "models.yaml" else gpus.load_table
    load(DATA / table)  # the shipped one loads
    with pytest.raises(TableError) as exc:
        load(bad)
    assert str(exc.value).startswith(f"{bad}: {error}"), str(exc.value)
    assert "\n" not in str(exc.value)
