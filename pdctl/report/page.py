"""The HTML around the charts: one page, its style inline, a Content-Security-Policy that
allows no request at all (the SVG is part of the page, not fetched)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.6em; text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 0.9em; } .note { color: #555; } .bad { color: #b00; font-weight: bold; }
figure { margin: 0.5em 0 1.5em; } figure svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 0.9em; }
"""


def num(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    return str(v)


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A table; numbers right-aligned, every cell escaped."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for v in row:
            cls = ' class="n"' if isinstance(v, (int, float)) or v is None else ""
            cells.append(f"<td{cls}>{escape(num(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def chart(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>"


def para(text: str, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<p{attr}>{escape(text)}</p>"


def section(title: str, *parts: str) -> str:
    return f"<h2>{escape(title)}</h2>" + "".join(parts)


def page(title: str, *parts: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{escape(title)}</h1>" + "".join(parts) + "</body></html>\n"
    )
