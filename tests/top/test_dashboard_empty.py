"""The dashboard of a window in which no instance answered says so: no `window 0s` title and
no `nothing crossed a threshold` verdict, which read as if the deployment were judged fine."""

from __future__ import annotations

from rich.console import Console

from pdctl.top.dashboard import render
from pdctl.top.window import Figures, Window


def _text(w: Window) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(render(w, []))
    return console.export_text()


def test_no_instance_answered_is_said_not_judged() -> None:
    down = Figures("d-serve-0", "serve", "lo1", error="connection refused")
    text = _text(Window("d", 0, "hosts", 0.0, (down,)))
    assert "d  phase 0 (hosts)  no instance answered" in text
    assert "window 0s" not in text
    assert "none: no instance answered /metrics, so nothing could be judged" in text
    assert "nothing crossed a threshold" not in text


def test_a_window_with_answers_and_no_verdict_says_nothing_crossed() -> None:
    up = Figures("d-serve-0", "serve", "lo1", seconds=30.0, running=0.0)
    text = _text(Window("d", 0, "hosts", 30.0, (up,)))
    assert "window 30s" in text
    assert "none: nothing crossed a threshold in this window" in text
