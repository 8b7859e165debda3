"""Deeply nested flow YAML is refused in one located line, never a crash: libyaml 0.2.5 (the one
PyYAML 6.0.3 bundles) has no nesting limit and its composer recurses in C, so 100,000 levels
overflowed the stack (exit -11) before pdctl counted the brackets first."""

from __future__ import annotations

import pytest

from pdctl.errors import SpecError
from pdctl.spec.source import parse


@pytest.mark.parametrize("depth", [40, 999, 5_000, 100_000])
def test_deep_flow_nesting_is_refused_at_its_line(depth):
    text = "phase: 0\nname: " + "[" * depth + "]" * depth + "\n"
    with pytest.raises(SpecError) as err:
        parse(text, "spec.yaml")
    assert "nested more than 32 levels" in err.value.message
    assert err.value.line_no == 2


def test_brackets_inside_a_quoted_string_are_only_text():
    """The bracket count cannot see quotes: it may send a spec to the slower parser, which
    reads the string as it is."""
    text = 'name: "' + "[" * 3_000 + '"\nphase: 0\n'
    data, _ = parse(text, "spec.yaml")
    assert data == {"name": "[" * 3_000, "phase": 0}
