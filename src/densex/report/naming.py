"""Order and display names shared by every report (Table 2, Table 3, the figures).

Paper order first (Chen et al. 2023, Tables 2-3), then our extra retrievers and datasets;
anything unknown follows in order of first appearance.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

RETRIEVER_ORDER = ("simcse", "contriever", "dpr", "ance", "tasb", "gtr", "bm25", "minilm")
GRANULARITY_ORDER = ("passage", "sentence", "proposition")
DATASET_ORDER = ("nq", "tqa", "webq", "squad", "eq", "curated", "squad-open", "demo")

DISPLAY = {
    "simcse": "SimCSE",
    "contriever": "Contriever",
    "dpr": "DPR",
    "ance": "ANCE",
    "tasb": "TAS-B",
    "gtr": "GTR",
    "minilm": "MiniLM",
    "bm25": "BM25",
    "nq": "NQ",
    "tqa": "TQA",
    "webq": "WebQ",
    "squad": "SQuAD",
    "eq": "EQ",
    "squad-open": "SQuAD-open",
}
# the dataset part of column labels ("NQ R@5"); other datasets keep their config name
DATASET_LABEL = {d: DISPLAY[d] for d in ("nq", "tqa", "webq", "squad", "eq", "squad-open")}


def ordered(values: Iterable[str], order: Sequence[str]) -> list[str]:
    """Distinct `values`: those in `order` in that order, then the rest as they first appear."""
    seen = list(dict.fromkeys(values))
    return [v for v in order if v in seen] + [v for v in seen if v not in order]


def order_index(value: str, order: Sequence[str]) -> int:
    """Sort key: the position in `order`, unknown values after every known one."""
    return order.index(value) if value in order else len(order)


def display_name(key: str) -> str:
    """The paper's spelling of a retriever/dataset/granularity name ("tasb" -> "TAS-B")."""
    return DISPLAY.get(key, key[:1].upper() + key[1:])
