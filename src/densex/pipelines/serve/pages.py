"""Server-rendered HTML: the explorer (one column per granularity) and the sweep browser.

Contract: `highlight(text, unit_span, answers, grey_context)` is the passage as escaped HTML
with the matched unit in `<mark class="unit">`, each answer occurrence in `<u class="answer">`
(nested correctly where they overlap) and, with `grey_context`, the rest of the passage in
`<span class="context">` (the paper's Table 4 layout). `unit_place(hit)` is the span of a
hit's best unit to mark in its passage, None when that unit is the whole passage (passage
retrieval: nothing is singled out, so nothing is painted). `render(name, **context)` renders
a template of `templates/` (Jinja2, autoescaped; `highlight` and `unit_place`
available, and a `pretty_json` filter); `markdown_table(md)` turns the first pipe table of a Markdown file (Table 2) into
rows of cells.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from densex.pipelines.search.spans import answer_spans

TEMPLATES = Path(__file__).resolve().parent / "templates"


def highlight(
    text: str, unit_span: Sequence[int] | None, answers: Sequence[str] | None = None,
    grey_context: bool = False,
) -> Markup:  # fmt: skip
    """The passage with its unit and answers marked (see the module doc): one `<mark>` around
    the unit, answers underlined inside or outside it."""
    marks = answer_spans(text, answers or [])
    cuts = {0, len(text)}
    unit = (int(unit_span[0]), int(unit_span[1])) if unit_span else None
    if unit:
        cuts.update(unit)
    for s, e in marks:
        cuts.update((s, e))
    bounds = sorted(c for c in cuts if 0 <= c <= len(text))
    parts: list[Any] = []
    region = None  # the wrapper open around the current piece: "unit" | "context" | None
    for s, e in zip(bounds, bounds[1:]):
        piece: Any = escape(text[s:e])
        if any(a <= s and e <= b for a, b in marks):
            piece = Markup('<u class="answer">%s</u>') % piece
        want = (
            "unit"
            if unit and unit[0] <= s and e <= unit[1]
            else "context"
            if grey_context
            else None
        )
        if want != region:
            parts.append(Markup(_CLOSE[region] + _OPEN[want]))
            region = want
        parts.append(piece)
    parts.append(Markup(_CLOSE[region]))
    return Markup("").join(parts)


def unit_place(hit: Any) -> tuple[int, int] | None:
    """The best unit's span in `hit.text` (a `search.index.Hit`), None when there is none or
    it covers the whole passage."""
    span = hit.units[0].span if hit.units else None
    if span is None:
        return None
    text = hit.text
    whole = (len(text) - len(text.lstrip()), len(text.rstrip()))
    return None if (span[0], span[1]) == whole else (int(span[0]), int(span[1]))


_OPEN = {"unit": '<mark class="unit">', "context": '<span class="context">', None: ""}
_CLOSE = {"unit": "</mark>", "context": "</span>", None: ""}


def markdown_table(md: str | None) -> list[list[str]]:
    """The first pipe table of `md` as rows of cell strings (header first, rule dropped)."""
    rows: list[list[str]] = []
    for line in (md or "").splitlines():
        s = line.strip()
        if s.startswith("|"):
            cells = [c.strip() for c in s.strip("|").split("|")]
            if not all(set(c) <= set(":- ") for c in cells):
                rows.append(cells)
        elif rows:
            break
    return rows


@lru_cache(maxsize=1)
def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]))
    env.globals["highlight"] = highlight
    env.globals["unit_place"] = unit_place
    env.filters["pretty_json"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False)
    return env


def render(name: str, **context: Any) -> str:
    """`templates/<name>` rendered with `context`."""
    return _env().get_template(name).render(**context)
