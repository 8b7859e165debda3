"""Llama-3.1-405B is in pdctl's model table: the multi-node example plans from its own
shapes (126 layers, 8 KV heads), not an estimate from another model's."""

from __future__ import annotations

import json
from pathlib import Path

from pdctl.capacity.models import builtin_config
from tests.helpers import cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "phase0-multinode.yaml"


def test_the_table_has_llama_3_1_405b() -> None:
    for name in ("meta-llama/Llama-3.1-405B", "meta-llama/Llama-3.1-405B-Instruct",
                 "meta-llama/Meta-Llama-3.1-405B-Instruct"):
        config = builtin_config(name)
        assert config is not None, name
        assert (config["num_hidden_layers"], config["hidden_size"], config["num_key_value_heads"],
                config["intermediate_size"], config["vocab_size"]) == (126, 16384, 8, 53248, 128256)


def test_the_multinode_example_plans_without_an_estimate() -> None:
    out, err = cli(["plan", str(EXAMPLE), "-o", "json"])
    doc = json.loads(out)
    assert "did you mean" not in err + out and "estimated" not in out
    role = doc["roles"][0]
    # 2 (K, V) x 63 layers a stage x 1 KV head a GPU (8 / TP 8) x 128 x 2 bytes = 31.5 KiB
    assert role["kvBytesPerToken"] == 2 * 63 * 1 * 128 * 2
