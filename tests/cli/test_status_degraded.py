"""`pdctl status` (issue 36): a router whose /liveness answers but that has no healthy worker
of a role is `degraded`, not up, and the summary line counts what is up per role. Pure
checks on the real vllm-router 0.1.17's recorded /readiness answers (data/README.md)."""

from __future__ import annotations

from pathlib import Path

from pdctl.cli.summary import degrade, status_counts, status_line
from pdctl.top.router import readiness

DATA = Path(__file__).parent / "data"


def row(unit: str, role: str, health: str = "healthy", state: str = "running") -> dict:
    return {"host": "lo1", "unit": unit, "role": role, "pid": "1", "state": state,
            "health": health, "model": "", "endpoint": "", "why": "", "kind": "instance",
            "supervisor": "systemd"}


ROWS = [row("pd-prefill-0", "prefill"), row("pd-decode-0", "decode"),
        row("pd-router", "router")]


def test_the_routers_readiness_is_read_as_healthy_of_total_per_role():
    ready = readiness(200, (DATA / "router-readiness-ready.json").read_text())
    assert ready == {"prefill": (1, 1), "decode": (1, 1)}
    gone = readiness(503, (DATA / "router-readiness-no-decode.json").read_text())
    assert gone == {"prefill": (1, 1), "decode": (0, 1)}
    assert readiness(200, "OK") is None


def test_a_router_without_a_healthy_decode_is_degraded_though_its_liveness_answers():
    view = {"pd-router": readiness(503, (DATA / "router-readiness-no-decode.json").read_text())}
    rows = degrade(ROWS, view)
    router = rows[2]
    assert router["health"] == "degraded"
    assert router["why"] == ("the router sees 0 of 1 decode healthy (its /readiness): requests "
                             "get 503")
    assert status_line(rows) == "2 of 3 units up (prefill 1/1, decode 1/1, router 0/1 degraded)"
    counts = status_counts(rows)
    assert counts["up"] == 2 and counts["degraded"] == ["pd-router"]
    assert counts["upByRole"] == {"prefill": 1, "decode": 1, "router": 0}


def test_a_router_whose_decode_rows_are_all_down_is_degraded_without_its_own_view():
    rows = degrade([ROWS[0], row("pd-decode-0", "decode", "answered 503"), ROWS[2]])
    assert rows[2]["health"] == "degraded"
    assert "no decode up (pd-decode-0: answered 503)" in rows[2]["why"]
    assert status_line(rows) == "1 of 3 units up (prefill 1/1, decode 0/1, router 0/1 degraded)"


def test_a_router_with_every_role_healthy_stays_up():
    view = {"pd-router": readiness(200, (DATA / "router-readiness-ready.json").read_text())}
    rows = degrade(ROWS, view)
    assert rows == ROWS
    assert status_line(rows) == "3 of 3 units up (prefill 1/1, decode 1/1, router 1/1)"
