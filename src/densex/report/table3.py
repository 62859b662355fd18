"""Table 3 of the paper: open-domain QA EM@l, rows retriever x granularity.

Columns are datasets x EM@l budgets (EM@100, EM@500 in the paper) plus their average over
datasets; within each retriever the best granularity per column is bold, as in the paper.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from densex.utils.io import atomic_open
from densex.utils.logging import get_logger

log = get_logger(__name__)

RETRIEVER_ORDER = ["simcse", "contriever", "dpr", "ance", "tasb", "gtr"]
DATASET_ORDER = ["nq", "tqa", "webq", "squad", "eq"]
GRANULARITY_ORDER = ["passage", "sentence", "proposition"]
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
_EM = re.compile(r"^em@(\d+)$")


def _ordered(values: Iterable[str], order: list[str]) -> list[str]:
    values = set(values)
    return [v for v in order if v in values] + sorted(values - set(order))


def _name(key: str) -> str:
    return DISPLAY.get(key, key[:1].upper() + key[1:])


def em_cells(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str, int], float]:
    """(retriever, granularity, dataset, l) -> EM@l from result rows; later rows win."""
    cells: dict[tuple[str, str, str, int], float] = {}
    for row in rows:
        for key, value in row.items():
            m = _EM.match(str(key))
            if not m or value is None:
                continue
            cell = (str(row["retriever"]), str(row["granularity"]), str(row["dataset"]), int(m[1]))
            if cell in cells:
                log.warning("table3: several rows for %s; keeping the last", cell)
            cells[cell] = float(value)
    return cells


def table3_rows(rows: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Header and body (retriever, granularity, then one float or None per column)."""
    cells = em_cells(rows)
    retrievers = _ordered({c[0] for c in cells}, RETRIEVER_ORDER)
    grans = _ordered({c[1] for c in cells}, GRANULARITY_ORDER)
    datasets = _ordered({c[2] for c in cells}, DATASET_ORDER)
    budgets = sorted({c[3] for c in cells})
    header = ["retriever", "granularity"]
    header += [f"{d} EM@{b}" for d in datasets for b in budgets]
    header += [f"Avg EM@{b}" for b in budgets]
    body = []
    for r in retrievers:
        for g in grans:
            if not any(c[0] == r and c[1] == g for c in cells):
                continue
            values = [cells.get((r, g, d, b)) for d in datasets for b in budgets]
            for b in budgets:  # the average needs every dataset, as in the paper
                col = [cells.get((r, g, d, b)) for d in datasets]
                values.append(sum(col) / len(col) if all(v is not None for v in col) else None)
            body.append([r, g, *values])
    return header, body


def _fmt(v: float | None) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"


def _markdown(header: list[str], body: list[list[Any]]) -> str:
    budgets = sorted({h.split("@")[1] for h in header[2:]}, key=int)
    groups = [h.rsplit(" ", 1)[0] for h in header[2:]][:: len(budgets)]
    top = ["Retriever", "Granularity"] + [
        f"{_name(g) if g != 'Avg' else 'Avg'} EM@{b}" for g in groups for b in budgets
    ]
    lines = [
        "| " + " | ".join(top) + " |",
        "|" + "|".join(["---"] * 2 + ["---:"] * (len(top) - 2)) + "|",
    ]
    best: dict[tuple[str, int], float] = {}
    for row in body:
        for j, v in enumerate(row[2:]):
            if v is not None:
                best[(row[0], j)] = max(best.get((row[0], j), -math.inf), v)
    prev = None
    for row in body:
        cells = [_name(row[0]) if row[0] != prev else "", _name(row[1])]
        prev = row[0]
        for j, v in enumerate(row[2:]):
            s = _fmt(v)
            if v is not None and v == best.get((row[0], j)):
                s = f"**{s}**"
            cells.append(s)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_table3(rows: Iterable[Mapping[str, Any]], out_dir: str | os.PathLike) -> Path | None:
    """Write `table3.md` and `table3.csv` from results rows; None when no row has an EM@l."""
    header, body = table3_rows(list(rows))
    if not body:
        return None
    out = Path(out_dir)
    with atomic_open(out / "table3.csv") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        for row in body:
            w.writerow(row[:2] + ["" if v is None else f"{v:.4f}" for v in row[2:]])
    md = out / "table3.md"
    with atomic_open(md) as f:
        f.write(
            "Table 3: open-domain QA exact match (EM@l: reader given the first l retrieved words)\n\n"
        )
        f.write(_markdown(header, body))
    return md
