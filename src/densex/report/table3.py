"""Table 3 of the paper: open-domain QA EM@l, rows retriever x granularity.

Columns are datasets x EM@l budgets (EM@100, EM@500 in the paper) plus their average over
datasets; within each retriever the best granularity per column is bold, as in the paper.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from densex.report.naming import column_label, labelled, retriever_label
from densex.report.pivot import RESULT_FIELDS, cell_key, duplicate_cell, pivot_axes
from densex.utils.io import atomic_open
from densex.utils.logging import get_logger
from densex.utils.records import Record

log = get_logger(__name__)

_EM = re.compile(r"^em@(\d+)$")
# besides retriever x granularity x dataset, what tells cells apart; a label column (after the
# retriever) only when it varies within the rows
CONDITION_FIELDS = ("corpus", "index", "reader")


def em_cells(rows: Iterable[Record]) -> dict[tuple, float]:
    """(corpus, index, reader, retriever, granularity, dataset, l) -> EM@l from result rows.

    Two rows with an EM@l for the same cell (e.g. a sweep over a setting the table does not
    show) raise a DataError naming both jobs, rather than one silently winning.
    """
    cells: dict[tuple, float] = {}
    where: dict[tuple, str] = {}
    for i, row in enumerate(rows):
        for key, value in row.items():
            m = _EM.match(str(key))
            if not m or value is None:
                continue
            cell = (*cell_key(row, CONDITION_FIELDS), int(m[1]))
            job = str(row.get("job_dir") or f"row {i + 1}")
            if cell in cells:
                names = (*CONDITION_FIELDS, *RESULT_FIELDS, "budget")
                raise duplicate_cell(row, i + 1, key, "Table 3", names, cell, where[cell])
            cells[cell] = float(value)
            where[cell] = job
    return cells


def table3_rows(rows: Iterable[Record]) -> tuple[list[str], list[list[Any]]]:
    """Header and body: retriever, [corpus, index, reader where they vary], granularity, then
    one float or None per column."""
    cells = em_cells(rows)
    n = len(CONDITION_FIELDS)
    axes = pivot_axes(cells, n)
    conds, varying, retrievers = axes.conds, axes.varying, axes.retrievers
    grans, datasets = axes.granularities, axes.datasets
    budgets = sorted({c[n + 3] for c in cells})
    header = ["retriever", *(CONDITION_FIELDS[j] for j in varying), "granularity"]
    header += [f"{d} EM@{b}" for d in datasets for b in budgets]
    header += [f"Avg EM@{b}" for b in budgets]
    body = []
    for r in retrievers:
        for cond in conds:
            for g in grans:
                if not any(c[: n + 2] == (*cond, r, g) for c in cells):
                    continue
                values = [cells.get((*cond, r, g, d, b)) for d in datasets for b in budgets]
                for b in budgets:  # the average needs every dataset, as in the paper
                    col = [cells.get((*cond, r, g, d, b)) for d in datasets]
                    values.append(sum(col) / len(col) if all(v is not None for v in col) else None)
                body.append([r, *(cond[j] for j in varying), g, *values])
    return header, body


def _n_labels(header: list[str]) -> int:
    return header.index("granularity") + 1


def _fmt(v: float | None) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"


def _markdown(
    header: list[str], body: list[list[Any]], marks: dict[tuple, str] | None = None
) -> str:
    marks = marks or {}
    nl = _n_labels(header)
    budgets = sorted({h.split("@")[1] for h in header[nl:]}, key=int)
    groups = [h.rsplit(" ", 1)[0] for h in header[nl:]][:: len(budgets)]
    labels = ["Retriever", *(h.capitalize() for h in header[1 : nl - 1]), "Granularity"]
    top = labels + [column_label(f"{g} EM@{b}") for g in groups for b in budgets]
    lines = [
        "| " + " | ".join(top) + " |",
        "|" + "|".join(["---"] * nl + ["---:"] * (len(top) - nl)) + "|",
    ]
    # best granularity per column within a block (retriever [x varying conditions]): bold
    best: dict[tuple, float] = {}
    for row in body:
        block = tuple(row[: nl - 1])
        for j, v in enumerate(row[nl:]):
            if v is not None:
                best[(block, j)] = max(best.get((block, j), -math.inf), v)
    prev = None
    for row in body:
        block = tuple(row[: nl - 1])
        names = [retriever_label(row[0]), *(str(v) for v in row[1 : nl - 1])]
        cells = [*(names if block != prev else [""] * len(names)), str(row[nl - 1])]
        prev = block
        for j, v in enumerate(row[nl:]):
            s = _fmt(v)
            if v is not None and v == best.get((block, j)):
                s = f"**{s}**"
            cells.append(s + marks.get((*row[:nl], header[nl + j]), ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_table3(
    rows: Iterable[Record],
    out_dir: str | os.PathLike,
    marks: dict[tuple, str] | None = None,
    notes: str | None = None,
) -> Path | None:
    """Write `table3.md` and `table3.csv` from results rows; None when no row has an EM@l.
    `marks[(*label values, column)]` follow a cell's value in the Markdown, `notes` after it."""
    header, body = table3_rows(list(rows))
    if not body:
        return None
    out = Path(out_dir)
    with atomic_open(out / "table3.csv") as f:
        w = csv.writer(f, lineterminator="\n")
        nl = _n_labels(header)
        w.writerow([column_label(h) for h in header])  # the report vocabulary (naming)
        for row in body:
            shown = list(labelled(dict(zip(header[:nl], row[:nl]))).values())
            w.writerow(shown + ["" if v is None else f"{v:.4f}" for v in row[nl:]])
    md = out / "table3.md"
    with atomic_open(md) as f:
        f.write(
            "Table 3: open-domain QA exact match (EM@l: reader given the first l retrieved words)\n\n"
        )
        f.write(_markdown(header, body, marks))
        if notes:
            f.write("\n" + notes.rstrip("\n") + "\n")
    return md
