"""The pivot both result tables share (Table 2: recall, Table 3: EM): result rows keyed by
(conditions..., retriever, granularity, dataset), and the table's axes in paper order."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from densex.report.naming import DATASET_ORDER, GRANULARITY_ORDER, RETRIEVER_ORDER, ordered
from densex.utils.io import DataError
from densex.utils.records import Record

RESULT_FIELDS = ("retriever", "granularity", "dataset")


def condition_label(value: Any) -> str | None:
    """A condition value as a label (a config node by its name); None when absent."""
    if isinstance(value, Mapping):
        value = value.get("name")
    return None if value is None else str(value)


def cell_key(row: Record, condition_fields: Sequence[str]) -> tuple:
    """(condition labels..., retriever, granularity, dataset) of a result row."""
    conds = (condition_label(row.get(f)) for f in condition_fields)
    return (*conds, *(str(row[f]) for f in RESULT_FIELDS))


@dataclass(frozen=True)
class PivotAxes:
    """The distinct conditions (in first-seen order), the indices of those that vary, and the
    retrievers, granularities and datasets in paper order."""

    conds: list[tuple]
    varying: list[int]
    retrievers: list[str]
    granularities: list[str]
    datasets: list[str]


def pivot_axes(keys: Iterable[tuple], n_cond: int) -> PivotAxes:
    """The axes of cells keyed as `cell_key` gives them (extra key parts after are ignored)."""
    keys = list(keys)
    conds = list(dict.fromkeys(k[:n_cond] for k in keys))
    varying = [j for j in range(n_cond) if len({c[j] for c in conds}) > 1]
    return PivotAxes(
        conds,
        varying,
        ordered((k[n_cond] for k in keys), RETRIEVER_ORDER),
        ordered((k[n_cond + 1] for k in keys), GRANULARITY_ORDER),
        ordered((k[n_cond + 2] for k in keys), DATASET_ORDER),
    )


def duplicate_cell(
    row: Record,
    line: int,
    field: str,
    table: str,
    names: Sequence[str],
    key: Sequence[Any],
    other: str,
) -> DataError:
    """The error for a second result of one table cell (`other` names where the first is)."""
    return DataError(
        row.get("job_dir", "<rows>"),
        line,
        field,
        f"two results for the same {table} cell "
        + ", ".join(f"{n}={v}" for n, v in zip(names, key))
        + f" (also in {other}); they differ only in settings the table"
        " does not show: aggregate them in separate sweep dirs",
    )
