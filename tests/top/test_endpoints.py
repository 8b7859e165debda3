"""`pdctl top` tells a full batch by each engine's --max-num-seqs, which the plan records
(Instance.max_num_seqs: the role's maxNumSeqs, else the first one the spec's extraArgs give);
nothing parses it back out of an instance's rendered arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from pdctl.render import render
from pdctl.targets.hosts.observe import host_endpoints
from tests.conftest import ROOT
from tests.helpers import plan_of


def _plan(example: str, edit: Callable[[dict[str, Any]], None]) -> Any:
    data = yaml.safe_load((ROOT / "examples" / example).read_text())
    edit(data)
    return plan_of(data)


def _limits(plan: Any) -> dict[str, int | None]:
    return {
        e.role: e.max_num_seqs for e in host_endpoints(plan, render(plan)) if e.role != "router"
    }


def test_the_plan_records_max_num_seqs_and_top_reads_it_there() -> None:
    def edit(data: dict[str, Any]) -> None:
        data["prefill"]["maxNumSeqs"] = 64
        data["decode"]["extraArgs"] = ["--max-num-seqs", "128"]

    plan = _plan("phase2-p2p-nccl.yaml", edit)
    assert {i.role: i.max_num_seqs for i in plan.instances} == {"prefill": 64, "decode": 128}
    assert _limits(plan) == {"prefill": 64, "decode": 128}


def test_an_engine_extra_arg_counts_and_none_given_is_none() -> None:
    def edit(data: dict[str, Any]) -> None:
        data.setdefault("engine", {})["extraArgs"] = ["--max-num-seqs=32"]

    assert {i.max_num_seqs for i in _plan("phase0-conda.yaml", edit).instances} == {32}
    assert {i.max_num_seqs for i in _plan("phase0-conda.yaml", lambda d: None).instances} == {None}
