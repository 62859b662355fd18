"""A search's results as `Hit`s: the ranked passages, each with its best-scoring units placed
inside it (`spans.unit_span`). Text is read only for the passages and units returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from densex.pipelines.search.spans import unit_span


@dataclass
class Unit:
    """A retrieved unit of a passage: its score and `span`, the characters `[start, end)` of
    the passage text it matches (None when no word matches)."""

    id: str
    text: str
    score: float
    span: tuple[int, int] | None


@dataclass
class Hit:
    """A ranked passage: its score is the max over its units (`units`, best first)."""

    id: str
    title: str
    text: str
    score: float
    units: list[Unit] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the service returns (`span` as `[start, end]` or null)."""
        d = asdict(self)
        for u in d["units"]:
            u["span"] = list(u["span"]) if u["span"] is not None else None
        return d


def hits_of(cell: Any, results: Sequence[Any], per_passage: int) -> list[list[Hit]]:
    """`Hit`s from `retrieve_passages` results over `cell` (a `pipelines.evaluate.cell.Cell`),
    reading text for the returned rows only."""
    chosen: list[list[tuple[int, np.ndarray]]] = []
    for r in results:
        of_unit = cell.unit_passage_rows[r.unit_rows]
        chosen.append([(int(p), np.flatnonzero(of_unit == p)[:per_passage])
                       for p in r.passage_rows.tolist()])  # fmt: skip
    p_rows = np.unique([p for c in chosen for p, _ in c]).astype(np.int64)
    u_rows = np.unique(np.concatenate(
        [r.unit_rows[sel] for r, c in zip(results, chosen) for _, sel in c] or [[]]
    )).astype(np.int64)  # fmt: skip
    passages = {c: dict(zip(p_rows.tolist(), cell.passages.take(c, p_rows)))
                for c in ("id", "title", "text")}  # fmt: skip
    units = {c: dict(zip(u_rows.tolist(), cell.units.take(c, u_rows))) for c in ("id", "text")}
    out = []
    for r, c in zip(results, chosen):
        hits = []
        for (p, sel), score in zip(c, r.passage_scores.tolist()):
            text, title = passages["text"][p] or "", passages["title"][p] or ""
            hit_units = [
                Unit(units["id"][u], units["text"][u], float(s), unit_span(units["text"][u], text, title))
                for u, s in zip(r.unit_rows[sel].tolist(), r.unit_scores[sel].tolist())
            ]  # fmt: skip
            hits.append(Hit(passages["id"][p], title, text, float(score), hit_units))
        out.append(hits)
    return out
