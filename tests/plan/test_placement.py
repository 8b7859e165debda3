"""Placement the operator controls: automatic placement spreads over hosts, roles pin to hosts,
and a placement error names the constraint that bound (docs/placement.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdctl.errors import SpecError
from pdctl.plan import make_plan
from pdctl.plan.place import where
from pdctl.spec import load_text
from tests.conftest import ROOT
from tests.helpers import at, cli, written

# The case: two 8-GPU hosts, Qwen3-32B, prefill TP 4, decode TP 2 x 2.
TWO_HOSTS = """\
name: q32
phase: 2
model: {name: Qwen/Qwen3-32B}
hosts:
  - {name: host-a, address: 192.0.2.10, gpus: [0, 1, 2, 3, 4, 5, 6, 7]}
  - {name: host-b, address: 192.0.2.11, gpus: [0, 1, 2, 3, 4, 5, 6, 7]}
prefill: {replicas: 1, tensorParallel: 4}
decode: {replicas: 2, tensorParallel: 2}
disaggregation: {connector: nixl}
"""


def _plan(text: str):
    spec, source = load_text(text, "spec.yaml")
    try:
        return make_plan(spec)
    except SpecError as exc:
        raise source.locate(exc) from None


def _where(text: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    plan = _plan(text)
    return {i.name: (i.host.name, i.gpus) for i in plan.instances if i.host is not None}


def test_two_hosts_are_both_used() -> None:
    """Before: prefill and both decodes on host-a, host-b idle."""
    placed = _where(TWO_HOSTS)
    assert placed == {
        "q32-prefill-0": ("host-a", (0, 1, 2, 3)), "q32-decode-0": ("host-b", (0, 1)),
        "q32-decode-1": ("host-b", (2, 3)),
    }


def test_serve_replicas_spread_one_per_host_first() -> None:
    text = TWO_HOSTS.replace("phase: 2", "phase: 0").split("prefill:")[0]
    text += "serve: {replicas: 2, tensorParallel: 2}\n"
    assert {h for h, _ in _where(text).values()} == {"host-a", "host-b"}


def test_spreading_never_refuses_what_packing_fits() -> None:
    """Prefill 2 x TP 2 spread one per host would leave no host 8 free GPUs for decode."""
    text = TWO_HOSTS.replace(
        "prefill: {replicas: 1, tensorParallel: 4}", "prefill: {replicas: 2, tensorParallel: 2}"
    )
    text = text.replace(
        "decode: {replicas: 2, tensorParallel: 2}", "decode: {replicas: 1, tensorParallel: 8}"
    )
    placed = _where(text)
    assert placed["q32-decode-0"] == ("host-a", tuple(range(8)))
    assert {placed["q32-prefill-0"][0], placed["q32-prefill-1"][0]} == {"host-b"}


def test_pins_put_each_role_where_the_spec_says() -> None:
    text = TWO_HOSTS.replace("prefill: {replicas: 1,", "prefill: {hosts: [host-b], replicas: 1,")
    text = text.replace("decode: {replicas: 2,", "decode: {hosts: [host-a], replicas: 2,")
    placed = _where(text)
    assert placed["q32-prefill-0"][0] == "host-b"
    assert placed["q32-decode-0"][0] == placed["q32-decode-1"][0] == "host-a"


def test_serve_pin() -> None:
    text = TWO_HOSTS.replace("phase: 2", "phase: 0").split("prefill:")[0]
    text += "serve: {replicas: 2, tensorParallel: 2, hosts: [host-b]}\n"
    assert {h for h, _ in _where(text).values()} == {"host-b"}


def test_pin_to_an_unknown_host_is_a_located_error() -> None:
    text = TWO_HOSTS.replace("decode: {replicas: 2,", "decode: {hosts: [host-c], replicas: 2,")
    with pytest.raises(SpecError) as err:
        _plan(text)
    assert at(err.value) == ("spec.yaml", 8, "decode.hosts[0]")
    assert err.value.message.startswith("no host named 'host-c'"), err.value


def test_error_names_the_pin_that_bound() -> None:
    text = TWO_HOSTS.replace("decode: {replicas: 2,", "decode: {hosts: [host-a], replicas: 4,")
    with pytest.raises(SpecError) as err:
        _plan(text)
    assert at(err.value) == ("spec.yaml", 8, "decode.hosts")
    line = err.value.line()
    assert err.value.message.startswith("decode instance 3 of 4 needs 2 free GPUs"), line
    assert "decode.hosts pins it to host-a" in line and "add a host to the pin" in line


def test_error_names_the_host_instances_that_bound() -> None:
    """The issue's message said the plan needs 14 GPUs of 16 and not that `instances: 1`
    on host-a limited it."""
    text = TWO_HOSTS.replace(
        "gpus: [0, 1, 2, 3, 4, 5, 6, 7]}", "gpus: [0, 1, 2, 3, 4, 5, 6, 7], instances: 1}", 1
    )
    text = text.replace(
        "decode: {replicas: 2, tensorParallel: 2}", "decode: {replicas: 5, tensorParallel: 2}"
    )
    with pytest.raises(SpecError) as err:
        _plan(text)
    assert at(err.value) == ("spec.yaml", 5, "hosts[0].instances")
    line = err.value.line()
    assert err.value.message.startswith("decode instance 5 of 5"), line
    assert "host-a is full at `instances: 1` (hosts[0].instances)" in line
    assert "host-b has 0 of 8 GPUs free" in line
    assert "\n" not in line


def test_where_lists_every_unit() -> None:
    lines = where(_plan(TWO_HOSTS))
    assert lines == [
        "q32-prefill-0  on host-a  GPUs 0,1,2,3  port 8100",
        "q32-decode-0   on host-b  GPUs 0,1      port 8200",
        "q32-decode-1   on host-b  GPUs 2,3      port 8201",
        "q32-router     on host-a  GPUs -        port 8090",
    ]


def test_validate_prints_the_placement(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = written(tmp_path / "s.yaml", TWO_HOSTS)
    out, err = cli(["validate", str(spec)])
    assert "q32-decode-1   on host-b  GPUs 2,3      port 8201" in out


def test_validate_exits_2_on_a_pin_that_cannot_hold(tmp_path, capsys) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        TWO_HOSTS.replace("prefill: {replicas: 1,", "prefill: {hosts: [host-a], replicas: 3,")
    )
    out, err = cli(["validate", str(spec)], 2)
    assert len(err.strip().splitlines()) == 1
    assert ":7: prefill.hosts: prefill instance 3 of 3 needs 4 free GPUs" in err


HOST = "  - {{name: h{i}, address: 192.0.2.{a}, gpus: {gpus}{cap}}}\n"


def _fleet(
    gpus: list[int], caps: list[int | None], p: tuple[int, int], d: tuple[int, int],
    pins: tuple[list[int], list[int]],
) -> str:
    text = "name: f\nphase: 2\nmodel: {name: org/model}\nhosts:\n"
    for i, (n, cap) in enumerate(zip(gpus, caps, strict=True)):
        text += HOST.format(
            i=i, a=10 + i, gpus=list(range(n)), cap=f", instances: {cap}" if cap else ""
        )
    for role, (replicas, tp), pin in (("prefill", p, pins[0]), ("decode", d, pins[1])):
        text += f"{role}: {{replicas: {replicas}, tensorParallel: {tp}"
        text += f", hosts: {[f'h{i}' for i in pin]}}}\n" if pin else "}\n"
    return text + "disaggregation: {connector: nixl}\n"


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=3).flatmap(
        lambda g: st.tuples(
            st.just(g), st.lists(st.sampled_from([None, 1, 2]), min_size=len(g), max_size=len(g)),
            st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 4])),
            st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 4])),
            st.tuples(*[st.lists(st.integers(0, len(g) - 1), max_size=2, unique=True)] * 2),
        )
    )
)
def test_placement_invariants(case) -> None:
    """Disjoint GPUs per host, pins and caps held, and a spec that packing in spec order
    places is never refused."""
    gpus, caps, p, d, pins = case
    text = _fleet(gpus, caps, p, d, pins)
    spec, _ = load_text(text, "f.yaml")
    try:
        plan = make_plan(spec)
    except SpecError as exc:
        widths = [
            {tp for (_, tp), pin in ((p, pins[0]), (d, pins[1])) if not pin or i in pin}
            for i in range(len(gpus))
        ]
        if exc.path.endswith(".gpus"):  # a host no instance width divides: refused up front
            assert "cannot divide" in exc.message, exc.line()
            assert any(len(w) == 1 and n % min(w) for n, w in zip(gpus, widths, strict=True))
            return
        if "but it lists" in exc.message:  # `instances` more than the host's GPUs hold
            assert any(
                c and w and c * min(w) > n for n, c, w in zip(gpus, caps, widths, strict=True)
            )
            return
        assert exc.path.endswith((".replicas", ".instances", ".hosts")), exc.line()
        assert _packs(gpus, caps, p, d, pins) is False, exc.line()
        return
    seen: set[tuple[str, int]] = set()
    count: dict[str, int] = {}
    for inst in plan.instances:
        assert inst.host is not None
        index = int(inst.host.name[1:])
        for g in inst.gpus:
            assert (inst.host.name, g) not in seen and g < gpus[index]
            seen.add((inst.host.name, g))
        count[inst.host.name] = count.get(inst.host.name, 0) + 1
        pin = pins[0] if inst.role == "prefill" else pins[1]
        assert not pin or index in pin
    for i, cap in enumerate(caps):
        assert cap is None or count.get(f"h{i}", 0) <= cap


def _packs(gpus, caps, p, d, pins) -> bool:
    """Fill hosts in spec order (the placement before spreading), pins and caps held."""
    free = list(gpus)
    used = [0] * len(gpus)
    for (replicas, tp), pin in ((p, pins[0]), (d, pins[1])):
        for _ in range(replicas):
            for i in range(len(gpus)):
                if (pin and i not in pin) or free[i] < tp or (caps[i] and used[i] >= caps[i]):
                    continue
                free[i] -= tp
                used[i] += 1
                break
            else:
                return False
    return True


def test_where_lists_every_node_of_a_group() -> None:
    """A multi-node instance's other nodes (plan/group.py) are placed too: each is a line."""
    plan = _plan((ROOT / "examples" / "phase0-multinode.yaml").read_text())
    lines = where(plan)
    assert len(lines) == 2 and "-node1" in lines[1] and lines[0].split()[2] != lines[1].split()[2]


def test_a_host_no_role_may_use_is_not_held_to_their_widths() -> None:
    text = TWO_HOSTS.replace("phase: 2", "phase: 0").split("prefill:")[0]
    text = text.replace("gpus: [0, 1, 2, 3, 4, 5, 6, 7]}\n", "gpus: [0, 1, 2]}\n", 1)
    text += "serve: {replicas: 2, tensorParallel: 4, hosts: [host-b]}\n"
    assert {h for h, _ in _where(text).values()} == {"host-b"}
    with pytest.raises(SpecError) as err:  # unpinned, host-a's 3 GPUs are refused up front
        _plan(text.replace(", hosts: [host-b]", ""))
    assert err.value.path == "hosts[0].gpus" and "cannot divide" in err.value.message
