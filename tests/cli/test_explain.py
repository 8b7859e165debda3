"""`pdctl explain FIELD`: type, default, allowed values, description, example and child fields,
from the spec models; an unknown field is one line with the nearest names, exit 2."""

from __future__ import annotations

import pytest
import yaml

from pdctl.explain import explain_text
from pdctl.spec.model import Spec, Storage
from pdctl.spec.walk import paths
from tests.helpers import run_cli


def explain(field: str, capsys) -> str:
    code, out, err = run_cli(["explain", field], capsys)
    assert code == 0 and not err, err
    return out


def section(out: str, title: str) -> str:
    """The lines under TITLE: up to the next blank line."""
    lines = out.splitlines()
    start = lines.index(f"{title}:") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i]), len(lines))
    return "\n".join(lines[start:end])


def test_a_leaf_field(capsys) -> None:
    out = explain("kubernetes.storage.accessMode", capsys)
    assert out.startswith("FIELD:    kubernetes.storage.accessMode\nTYPE:     string\n")
    assert "DEFAULT:  ReadWriteOnce\n" in out
    assert "ALLOWED:  ReadWriteOnce, ReadWriteMany, ReadOnlyMany\n" in out
    words = " ".join(section(out, "DESCRIPTION").split())
    assert words == " ".join(Storage.model_fields["access_mode"].description.split())
    example = yaml.safe_load(section(out, "EXAMPLE"))
    assert example["kubernetes"]["storage"]["accessMode"] in ("ReadWriteOnce", "ReadWriteMany")


def test_a_section_lists_its_fields(capsys) -> None:
    out = explain("decode.share", capsys)
    assert "TYPE:     section (Share), optional\n" in out
    fields = section(out, "FIELDS")
    for name in ("perGpu", "gpuMemoryPercent", "gpuMemoryMib", "gpuCoresPercent"):
        assert f"    {name} " in fields
    assert "share" in yaml.safe_load(section(out, "EXAMPLE"))["decode"]


def test_range_and_required(capsys) -> None:
    out = explain("serve.replicas", capsys)
    assert "TYPE:     integer\nDEFAULT:  1\n" in out
    assert "RANGE:    >= 1, <= 10000\n" in out
    assert "DEFAULT:  none: required\n" in explain("hosts.address", capsys)


@pytest.mark.parametrize(
    "spelling",
    ["kubernetes.storage.access_mode", "hosts[0].gpus", "Kubernetes.Storage.AccessMode"],
)
def test_spellings(spelling: str, capsys) -> None:
    same = {
        "kubernetes.storage.access_mode": "kubernetes.storage.accessMode",
        "Kubernetes.Storage.AccessMode": "kubernetes.storage.accessMode",
        "hosts[0].gpus": "hosts.gpus",
    }[spelling]
    assert explain(spelling, capsys) == explain(same, capsys)


def test_the_top_lists_every_section(capsys) -> None:
    fields = section(explain("", capsys), "FIELDS")
    for field in Spec.model_fields.values():
        assert f"    {field.alias} " in fields


@pytest.mark.parametrize(
    ("field", "suggestion"),
    [
        ("decode.shar", "did you mean decode.share"),
        ("kubernetes.storag.accessMode", "did you mean kubernetes.storage"),
        ("replicas", "serve.replicas"),
    ],
)
def test_unknown_field_is_one_line(field: str, suggestion: str, capsys) -> None:
    code, out, err = run_cli(["explain", field], capsys)
    assert code == 2 and not out
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: explain {field}: no field ")
    assert suggestion in err


def test_every_field_explains_and_its_example_sets_it() -> None:
    for path in paths(Spec):
        out = explain_text(path) + "\n"
        assert out.startswith(f"FIELD:    {path}\n")
        if "\nEXAMPLE:\n" not in out:
            continue
        node = yaml.safe_load(section(out, "EXAMPLE"))
        for name in path.split("."):
            node = node[0] if isinstance(node, list) else node
            assert name in node, (path, out)
            node = node[name]


def _example_value(path: str) -> object:
    node = yaml.safe_load(section(explain_text(path) + "\n", "EXAMPLE"))
    for name in path.split("."):
        node = node[0] if isinstance(node, list) else node
        node = node[name]
    return node


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("decode.maxNumBatchedTokens", 8192), ("serve.maxNumSeqs", 256),
        ("decode.maxNumSeqs", 256), ("decode.gpuMemoryUtilization", 0.9),
        ("bench.durationS", 60), ("decode.share.gpuTotalMib", 143771),  # its "e.g."
        ("serve.rendezvousPort", 29501), ("workload.tpotMs", 50),
    ],
)
def test_examples_are_realistic(path: str, value: object) -> None:
    """A default, a documented example or a value inside the bounds: not the minimum."""
    assert _example_value(path) == value


def test_no_example_sits_on_an_exclusive_bound_or_a_fraction_s_end() -> None:
    for path in paths(Spec):
        out = explain_text(path)
        if "\nEXAMPLE:\n" not in out or "RANGE:    > 0, <= 1\n" not in out:
            continue
        assert 0 < _example_value(path) < 1, (path, out)


@pytest.mark.parametrize(("section_path", "field"), [("hardware", "gpu")])
def test_a_summary_does_not_end_at_an_abbreviation(section_path: str, field: str) -> None:
    fields = section(explain_text(section_path) + "\n", "FIELDS")
    line = fields.splitlines()[fields.splitlines().index(
        next(r for r in fields.splitlines() if r.split() and r.split()[0] == field)) + 1]
    assert "e.g. `H100`" in line, line


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("GPU type, e.g. `H100`. More here.", "GPU type, e.g. `H100`."),
        ("One, i.e. Two. Three.", "One, i.e. Two."),
        ("Ports, etc. Are fine. Next.", "Ports, etc. Are fine."),
        ("A vs. B. Then C.", "A vs. B."),
        ("Plain. Second.", "Plain."),
    ],
)
def test_first_sentence_skips_abbreviations(text: str, first: str) -> None:
    from pdctl.explain import _first_sentence

    assert _first_sentence(text) == first
