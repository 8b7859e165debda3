"""The shipped data tables (pdctl/data/models.yaml, gpus.yaml): a malformed entry is refused
with one line naming the file and the entry, never a traceback from deep in the planner."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdctl.capacity import gpus, models
from pdctl.capacity.tables import TableError
from tests.helpers import written

DATA = Path(models.__file__).resolve().parents[1] / "data"


@pytest.mark.parametrize(
    ("table", "old", "new", "error"),
    [
        (
            "models.yaml", "hidden_size: 896\n", 'hidden_size: "896"\n',
            "models.qwen2.5-0.5b: hidden_size: Input should be a valid integer (got '896')",
        ),
        (
            "models.yaml", "qwen3-0.6b:\n    family: qwen3\n", "qwen3-0.6b:\n    family: qwen4\n",
            "models.qwen3-0.6b.family: 'qwen4' is not in the table",
        ),
        ("models.yaml", "  qwen2-7b: qwen2.5-7b", "  qwen2-7b: qwen2-7b", "aliases.qwen2-7b:"),
        ("gpus.yaml", "bandwidth_gbs: 300,", "bandwidth_gbs: -300,", "gpus.L4: bandwidth_gbs:"),
        ("gpus.yaml", "memory_mib: 8188,", "memory_mb: 8188,", "gpus.RTX-4060: memory_mib: Field"),
        ("gpus.yaml", "  l4: L4", "  l4: L5", "aliases.l4: 'L5' is not in the table"),
    ],
    ids=["model-type", "model-family", "model-alias", "gpu-range", "gpu-missing", "gpu-alias"],
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
