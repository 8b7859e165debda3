"""Change detection: a unit's hash (the `pdctl-hash` header, the container label) changes with
everything its start script holds, so `up` replaces what differs."""

from __future__ import annotations

import re

import pytest

from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text

SPEC = """name: h
phase: 0
model: {{name: Qwen/Qwen2.5-0.5B-Instruct}}
hosts:
- {{name: a, address: 10.0.0.1, gpus: [0], runtime: {runtime}, hfCache: {cache}}}
serve: {{port: 8000}}
"""


def start_script(runtime: str, cache: str) -> str:
    spec, _ = load_text(SPEC.format(runtime=runtime, cache=cache), "spec.yaml")
    bundle = render(make_plan(spec))
    (text,) = [a.text for a in bundle.artifacts if a.path.endswith("-serve-0/start.sh")]
    return text


def digest(text: str) -> str:
    found = re.search(r"pdctl-hash: (\w+)", text)
    assert found, text
    return found.group(1)


@pytest.mark.parametrize("runtime", ["conda", "docker"])
def test_hash_follows_the_hf_cache_in_the_start_script(runtime: str) -> None:
    one, two = start_script(runtime, "/data/hf"), start_script(runtime, "/scratch/hf")
    assert "/data/hf" in one and "/scratch/hf" in two  # the cache is in the script ...
    assert digest(one) != digest(two)  # ... so it is in the hash
    assert digest(one) == digest(start_script(runtime, "/data/hf"))
