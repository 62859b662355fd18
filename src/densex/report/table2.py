"""The paper's Table 2: passage recall@k by retriever x granularity x dataset.

Layout (Chen et al. 2023, Table 2): one block of rows per retriever (passage, sentence,
proposition), columns dataset x recall@{5,20} then the average over datasets; we add a row per
retriever with the gain of propositions over passages. Values are percentages, as printed in
the paper. Inputs are the `results.jsonl` rows that every evaluate job writes.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from densex.utils.io import DataError, atomic_open, read_jsonl

# paper order; anything else follows in order of first appearance
RETRIEVER_ORDER = ("simcse", "contriever", "dpr", "ance", "tasb", "gtr", "bm25", "minilm")
GRANULARITY_ORDER = ("passage", "sentence", "proposition")
DATASET_ORDER = ("nq", "tqa", "webq", "squad", "eq", "curated", "squad-open", "demo")
DATASET_LABEL = {"nq": "NQ", "tqa": "TQA", "webq": "WebQ", "squad": "SQuAD", "eq": "EQ"}
GAIN = "gain"  # the granularity label of the proposition - passage row

RESULT_FIELDS = ("retriever", "granularity", "dataset")


def find_results(root: str | os.PathLike) -> list[Path]:
    """Every job's `results.jsonl` under a sweep dir, in job-number order (numeric subdirs)."""

    def key(p: Path) -> tuple:
        return tuple(int(s) if s.isdigit() else math.inf for s in p.relative_to(root).parts[:-1])

    return sorted(Path(root).rglob("results.jsonl"), key=lambda p: (key(p), str(p)))


def load_results(paths: Iterable[str | os.PathLike]) -> list[dict[str, Any]]:
    """Read results rows; each gets `job_dir` (the folder of its file)."""
    rows = []
    for path in paths:
        for row in read_jsonl(path, nonempty=RESULT_FIELDS):
            rows.append({**row, "job_dir": str(Path(path).parent)})
    return rows


def _ordered(values: Iterable[str], order: Sequence[str]) -> list[str]:
    seen = list(dict.fromkeys(values))
    return [v for v in order if v in seen] + [v for v in seen if v not in order]


def table2_rows(
    rows: Sequence[dict[str, Any]], ks: Sequence[int] = (5, 20)
) -> list[dict[str, Any]]:
    """Flat Table 2 rows: `retriever`, `granularity`, `{dataset} R@k` ..., `Avg R@k` (in %).

    Repeated cells (e.g. a budget sweep re-evaluating the same retrieval) are averaged. The
    average is over all datasets of the table and left empty (NaN) if a row misses one, as a
    partial average is not comparable. After each retriever's block comes a `gain` row:
    proposition minus passage, in points. Rows carry recall in percent (as evaluate writes it).
    """
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for i, row in enumerate(rows):
        for k in ks:
            if f"recall@{k}" not in row:
                raise DataError(row.get("job_dir", "<rows>"), i + 1, f"recall@{k}", "missing")
        key = (str(row["retriever"]), str(row["granularity"]), str(row["dataset"]))
        cells.setdefault(key, []).append(row)
    retrievers = _ordered((r for r, _, _ in cells), RETRIEVER_ORDER)
    granularities = _ordered((g for _, g, _ in cells), GRANULARITY_ORDER)
    datasets = _ordered((d for _, _, d in cells), DATASET_ORDER)
    columns = [f"{d} R@{k}" for d in datasets for k in ks] + [f"Avg R@{k}" for k in ks]

    out: list[dict[str, Any]] = []
    for r in retrievers:
        block: dict[str, dict[str, Any]] = {}
        for g in granularities:
            if not any((r, g, d) in cells for d in datasets):
                continue
            line: dict[str, Any] = {"retriever": r, "granularity": g}
            for d in datasets:
                for k in ks:
                    vals = [float(x[f"recall@{k}"]) for x in cells.get((r, g, d), [])]
                    line[f"{d} R@{k}"] = sum(vals) / len(vals) if vals else math.nan
            for k in ks:
                line[f"Avg R@{k}"] = sum(line[f"{d} R@{k}"] for d in datasets) / len(datasets)
            block[g] = line
            out.append(line)
        if "passage" in block and "proposition" in block:
            gain = {"retriever": r, "granularity": GAIN}
            for c in columns:
                gain[c] = block["proposition"][c] - block["passage"][c]
            out.append(gain)
    return out


def _fmt(v: Any, signed: bool = False) -> str:
    if isinstance(v, float):
        return "–" if math.isnan(v) else (f"{v:+.1f}" if signed else f"{v:.1f}")
    return str(v)


def metric_columns(table: Sequence[dict[str, Any]]) -> list[str]:
    return [c for c in table[0] if c not in ("retriever", "granularity")] if table else []


def table2_markdown(table: Sequence[dict[str, Any]]) -> str:
    """GitHub Markdown: the retriever is printed once per block, gains are signed."""
    cols = metric_columns(table)
    header = ["Retriever", "Granularity"] + [_label(c) for c in cols]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * 2 + "---:|" * len(cols)]
    prev = None
    for row in table:
        gain = row["granularity"] == GAIN
        name = row["retriever"] if row["retriever"] != prev else ""
        prev = row["retriever"]
        gran = "Δ prop − psg" if gain else row["granularity"].capitalize()
        lines.append("| " + " | ".join([name, gran] + [_fmt(row[c], gain) for c in cols]) + " |")
    return "\n".join(lines) + "\n"


def _label(col: str) -> str:
    dataset, metric = col.rsplit(" ", 1)
    return f"{DATASET_LABEL.get(dataset, dataset)} {metric}"


def write_table2(
    rows: Sequence[dict[str, Any]], out_dir: str | os.PathLike, ks: Sequence[int] = (5, 20)
) -> list[dict[str, Any]]:
    """Write `table2.md` and `table2.csv` into `out_dir` (atomically); return the table rows."""
    table = table2_rows(rows, ks)
    out = Path(out_dir)
    with atomic_open(out / "table2.md") as f:
        f.write("Passage recall@k (%) by retriever and retrieval granularity (cf. Table 2).\n\n")
        f.write(table2_markdown(table))
    with atomic_open(out / "table2.csv") as f:
        fields = ["retriever", "granularity", *metric_columns(table)]
        writer = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for row in table:
            writer.writerow({c: round(v, 4) if isinstance(v, float) else v for c, v in row.items()})
    return table


def print_table2(
    table: Sequence[dict[str, Any]], title: str = "Table 2: passage recall@k (%)"
) -> None:
    """A rich table on the console, one section per retriever."""
    from rich.console import Console
    from rich.table import Table

    cols = metric_columns(table)
    t = Table(title=title)
    t.add_column("Retriever")
    t.add_column("Granularity")
    for c in cols:
        t.add_column(_label(c), justify="right")
    prev = None
    for row in table:
        if prev is not None and row["retriever"] != prev:
            t.add_section()
        gain = row["granularity"] == GAIN
        name = row["retriever"] if row["retriever"] != prev else ""
        prev = row["retriever"]
        t.add_row(
            name,
            "Δ prop − psg" if gain else row["granularity"],
            *[_fmt(row[c], gain) for c in cols],
        )
    Console().print(t)
