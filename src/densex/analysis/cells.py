"""How a sweep's cells are compared: blocks that share everything but the granularity, the
(a, b) granularity pairs inside a block, and the labels of their metrics.

Metric labels are `report.naming.metric_label`'s. A block is (corpus, index, retriever,
dataset) (`BLOCK_FIELDS`; plus reader and budget,
`QA_FIELDS`, for EM@l); in it every granularity is compared with each baseline of `BASELINES`
that precedes it in the table's order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from densex.report.naming import GRANULARITY_ORDER, ordered

BASELINES = ("passage", "sentence", "proposition")
BLOCK_FIELDS = ("corpus", "index", "retriever", "dataset")
QA_FIELDS = ("reader", "budget")


def cell_label(value: Any) -> str | None:
    """A condition's label: its value, or the `name` of a config node; None stays None."""
    if isinstance(value, Mapping):
        value = value.get("name")
    return None if value is None else str(value)


def granularity_pairs(grans: Sequence[str], baselines: Sequence[str]) -> list[tuple[str, str]]:
    """(a, b) pairs of `grans`: each baseline b present, against every a after it in the
    table's granularity order."""
    order = ordered(grans, GRANULARITY_ORDER)
    return [
        (a, b)
        for b in baselines
        if b in order
        for a in order
        if a != b and order.index(a) > order.index(b)
    ]
