"""matplotlib figures to inline SVG, the same bytes for the same data.

matplotlib is imported here only (a report was asked for): `pdctl --help` never loads it. The
object API (`Figure`) is used, not pyplot: no global figure state, no GUI backend. Text is
drawn as paths (`svg.fonttype: path`), so the page needs no font; `svg.hashsalt` fixes the ids
matplotlib would otherwise draw at random, and `metadata={"Date": None}` leaves the date out."""

from __future__ import annotations

import io
from typing import Any

RC: Any = {
    "svg.hashsalt": "pdctl-report", "svg.fonttype": "path", "svg.image_inline": True,
    "font.size": 9, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
    "axes.spines.right": False,
}


def figure(cols: int = 1, rows: int = 1, width: float = 10.0, height: float = 3.4) -> Any:
    """A figure of rows x cols axes (a flat list of them is `fig.axes`)."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(RC):  # the axes take the style when they are made
        fig = Figure(figsize=(width, height * rows), layout="constrained")
        fig.subplots(rows, cols, squeeze=False)
    return fig


def to_svg(fig: Any) -> str:
    """The figure as an <svg> element (XML declaration and doctype left out)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context(RC):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]

