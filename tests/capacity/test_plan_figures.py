"""plan's load and search tables write every figure alike: thousands separated, no exponent
form, the decimals a size gets (trailing zeros kept)."""

from __future__ import annotations

import re
from pathlib import Path

from pdctl.cli.plan_table import figure, figure_pair
from tests.helpers import cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "phase2-nixl-hosts.yaml"


def test_figures() -> None:
    assert figure(12_840.4) == "12,840" and figure(428.44) == "428.4"
    assert figure(10.98) == "10.98" and figure(11.0) == "11.00" and figure(0.5) == "0.500"
    assert figure_pair(10.98, 11.0) == "10.98 (11.00)"
    assert figure_pair(12_840.2, 12_950.9) == "12,840 (12,951)"


def test_the_load_table_has_no_exponent_form() -> None:
    out, _ = cli(["plan", str(EXAMPLE), "--load", "concurrency=512", "--load", "concurrency=8"])
    table = out.split("speed at a load")[1]
    assert not re.search(r"\de[+-]\d", table), table
    assert re.search(r"E2E ms p50 \(p90\)\s+│\s+[0-9]{2},[0-9]{3} \([0-9]{2},[0-9]{3}\)", table)
