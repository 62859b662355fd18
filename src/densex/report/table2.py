"""The paper's Table 2: passage recall@k by retriever x granularity x dataset (Chen et al. 2023):
a block of rows per retriever (passage, sentence, proposition, then our Δ prop − psg row),
columns dataset x R@k then the average over datasets, in percent, from the `results.jsonl` rows
every evaluate job writes."""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from densex.report.naming import GAIN, column_label, labelled, split_column
from densex.report.pivot import RESULT_FIELDS, cell_key, duplicate_cell, pivot_axes
from densex.report.table2_metrics import (
    Metrics,
    answer_recall_legend,
    datasets_of,
    full_metrics,
    metrics_legend,
    table2_metrics,
)
from densex.utils.io import DataError, atomic_open, read_jsonl
from densex.utils.logging import render
from densex.utils.slurm import read_failed_cells

# what else tells conditions apart: shown as row labels only when it varies within the rows
CONDITION_FIELDS = ("corpus", "index")
# what repeats of a cell may differ in without changing retrieval (they are averaged)
REPEAT_FIELDS = ("budget", "reader")
LABEL_FIELDS = ("retriever", *CONDITION_FIELDS, "granularity")


def find_results(root: str | os.PathLike) -> list[Path]:
    """Every job's `results.jsonl` under a sweep dir, in job-number order: cell folders are
    named by the job number, alone (`0`) or before the cell's overrides
    (`0_granularity=passage`, conf/evaluate.yaml's `hydra.sweep.subdir`), so `10_...` sorts
    after `2_...`."""

    def key(p: Path) -> tuple:
        parts = p.relative_to(root).parts[:-1]
        return tuple(int(m[1]) if (m := _JOB_NUM.match(s)) else math.inf for s in parts)

    return sorted(Path(root).rglob("results.jsonl"), key=lambda p: (key(p), str(p)))


_JOB_NUM = re.compile(r"^(\d+)(?:_|$)")


def load_results(paths: Iterable[str | os.PathLike]) -> list[dict[str, Any]]:
    """Read results rows; each gets `job_dir` (the folder of its file)."""
    rows = []
    for path in paths:
        for row in read_jsonl(path, nonempty=RESULT_FIELDS):
            rows.append({**row, "job_dir": str(Path(path).parent)})
    return rows


def _table2_cells(
    rows: Sequence[dict[str, Any]], metrics: dict[str, Metrics]
) -> dict[tuple, list[dict[str, Any]]]:
    """Rows grouped by cell (`pivot.cell_key`); a row missing a metric of its dataset, or a
    second row of a cell with the same budget and reader, is a DataError."""
    cells: dict[tuple, list[dict[str, Any]]] = {}
    seen: dict[tuple, tuple[int, dict[str, Any]]] = {}
    for i, row in enumerate(rows):
        for _, field in metrics[str(row.get("dataset"))]:
            if field not in row:
                raise DataError(row.get("job_dir", "<rows>"), i + 1, field, "missing")
        key = cell_key(row, CONDITION_FIELDS)
        full = (*key, *(str(row.get(f)) for f in REPEAT_FIELDS))
        if full in seen:
            j, other = seen[full]
            names = (*CONDITION_FIELDS, *RESULT_FIELDS)
            where = other.get("job_dir") or f"row {j + 1}"
            raise duplicate_cell(
                row, i + 1, "retriever/granularity/dataset", "Table 2", names, key, where
            )
        seen[full] = (i, row)
        cells.setdefault(key, []).append(row)
    return cells


def _per_dataset(
    rows: Sequence[dict[str, Any]], ks: Sequence[int], metrics: Any
) -> dict[str, list[tuple[str, str]]]:
    if metrics is None:
        return table2_metrics(rows, ks)
    if isinstance(metrics, dict):
        return {str(d): list(m) for d, m in metrics.items()}
    return {d: list(metrics) for d in datasets_of(rows)}


def table2_rows(
    rows: Sequence[dict[str, Any]],
    ks: Sequence[int] | None = None,
    metrics: Metrics | dict[str, Metrics] | None = None,
) -> list[dict[str, Any]]:
    """Flat Table 2 rows: `retriever`, `granularity`, `{dataset} R@k` ..., `Avg R@k` (in %),
    for the cut-offs `ks` (None: every cut-off all of a dataset's rows have).

    A cell is (corpus, index, retriever, granularity, dataset). Its repeats that differ only in
    budget or reader (a QA sweep re-evaluating the same retrieval) are averaged; two rows of
    the same cell that agree on those too are a conflict (a sweep over a setting this table
    does not show): a DataError naming both jobs. `corpus` and `index` become label columns
    (after `retriever`) only when they vary. The average is over all datasets of the table,
    NaN if a row misses one (a partial average is not comparable). After each block comes a
    `naming.GAIN` row: proposition minus passage, in points. Keys are config names (`minilm`,
    `demo R@5`); writers show them through `naming.labelled`. `metrics` ((column label, row
    key) pairs for every dataset, or `{dataset: pairs}`; default `table2_metrics`) gives the
    columns, e.g. `("AR@100", "answer_recall@100")`; `Avg` columns: those every dataset has.
    """
    per = _per_dataset(rows, ks, metrics)
    cells = _table2_cells(rows, per)
    axes = pivot_axes(cells, len(CONDITION_FIELDS))
    varying = [CONDITION_FIELDS[j] for j in axes.varying]
    retrievers, conds = axes.retrievers, axes.conds
    granularities, datasets = axes.granularities, axes.datasets
    shared = [m for m in per[datasets[0]] if all(m in per[d] for d in datasets)] if datasets else []
    columns = [f"{d} {m}" for d in datasets for m, _ in per[d]] + [f"Avg {m}" for m, _ in shared]

    out: list[dict[str, Any]] = []
    for r in retrievers:
        for cond in conds:
            labels = {f: cond[CONDITION_FIELDS.index(f)] for f in varying}
            block: dict[str, dict[str, Any]] = {}
            for g in granularities:
                if not any((*cond, r, g, d) in cells for d in datasets):
                    continue
                line: dict[str, Any] = {"retriever": r, **labels, "granularity": g}
                for d in datasets:
                    for m, field in per[d]:
                        vals = [float(x[field]) for x in cells.get((*cond, r, g, d), [])]
                        line[f"{d} {m}"] = sum(vals) / len(vals) if vals else math.nan
                for m, _ in shared:
                    line[f"Avg {m}"] = sum(line[f"{d} {m}"] for d in datasets) / len(datasets)
                block[g] = line
                out.append(line)
            if "passage" in block and "proposition" in block:
                gain = {"retriever": r, **labels, "granularity": GAIN}
                for c in columns:
                    gain[c] = block["proposition"][c] - block["passage"][c]
                out.append(gain)
    return out


def _fmt(v: Any, signed: bool = False) -> str:
    if isinstance(v, float):
        return "–" if math.isnan(v) else (f"{v:+.1f}" if signed else f"{v:.1f}")
    return "–" if v is None else str(v)


def label_columns(table: Sequence[dict[str, Any]]) -> list[str]:
    """`retriever`, the varying conditions (`corpus`, `index`) if any, `granularity`."""
    return [c for c in LABEL_FIELDS if table and c in table[0]]


def metric_columns(table: Sequence[dict[str, Any]]) -> list[str]:
    return [c for c in table[0] if c not in LABEL_FIELDS] if table else []


def display_columns(table: Sequence[dict[str, Any]]) -> list[str]:
    """Metric columns to show: the `Avg` columns only when there is more than one dataset to
    average (the CSV keeps them all)."""
    cols = metric_columns(table)
    datasets = {split_column(c)[0] for c in cols if not c.startswith("Avg ")}
    return [c for c in cols if len(datasets) > 1 or not c.startswith("Avg ")]


def _block(row: dict[str, Any]) -> tuple:
    return tuple(row.get(c) for c in ("retriever", *CONDITION_FIELDS))


def mark_key(row: dict[str, Any], column: str) -> tuple:
    """The key of a Table 2 cell in `marks`: (retriever, corpus, index, granularity, column)."""
    return (*(row.get(c) for c in LABEL_FIELDS), column)


def _shown(
    table: Sequence[dict[str, Any]], cols: Sequence[str], marks: dict[tuple, str]
) -> tuple[list[str], list[tuple[bool, list[str]]]]:
    """The header and the cells (first of its block?, texts) of a shown table, in the report
    vocabulary: block labels once per block, gains signed, `marks` after the values."""
    block_cols = label_columns(table)[:-1]  # all but granularity
    header = (
        [c.capitalize() for c in block_cols] + ["Granularity"] + [column_label(c) for c in cols]
    )
    out, prev = [], None
    for row in table:
        gain, shown, first = row["granularity"] == GAIN, labelled(row), _block(row) != prev
        names = [_fmt(shown[c]) if first else "" for c in block_cols]
        prev = _block(row)
        vals = [_fmt(row[c], gain) + marks.get(mark_key(row, c), "") for c in cols]
        out.append((first, [*names, shown["granularity"], *vals]))
    return header, out


def table2_markdown(
    table: Sequence[dict[str, Any]],
    marks: dict[tuple, str] | None = None,
    columns: Sequence[str] | None = None,
) -> str:
    """GitHub Markdown in the report vocabulary (`naming.labelled`): the block labels are
    printed once per block, gains are signed; `marks[mark_key(row, column)]` (e.g.
    significance markers) follow a cell's value; `columns` (default `display_columns`) the
    metric columns to show."""
    cols = list(columns) if columns is not None else display_columns(table)
    header, rows = _shown(table, cols, marks or {})
    n_labels = len(header) - len(cols)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * n_labels + "---:|" * len(cols)]
    lines += ["| " + " | ".join(cells) + " |" for _, cells in rows]
    return "\n".join(lines) + "\n"


def _write_csv(path: Path, table: Sequence[dict[str, Any]]) -> None:
    """The table in the report vocabulary (`naming.labelled`), floats to 4 decimals."""
    with atomic_open(path) as f:
        fields = list(labelled({c: None for c in (*label_columns(table), *metric_columns(table))}))
        writer = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for row in table:
            writer.writerow(
                {c: round(v, 4) if isinstance(v, float) else v for c, v in labelled(row).items()}
            )


def missing_cells_markdown(sweep_dir: str | os.PathLike) -> str | None:
    """The cells of the sweep that failed (`densex.utils.slurm.FAILED_CELLS`, written by the
    SLURM launcher) as a Markdown list, or None when every cell succeeded."""
    failed = read_failed_cells(sweep_dir)
    lines = [
        f"- cell #{f['cell']} `{' '.join(f['overrides'])}`: SLURM job {f['slurm_job_id']}, "
        f"log `{f['log']}`: {f['error']}"
        for f in failed
    ]
    head = f"**Missing: {len(failed)} cell(s) failed** and are not in the table above:\n\n"
    return head + "\n".join(lines) + "\n" if failed else None


def write_table2(
    rows: Sequence[dict[str, Any]],
    out_dir: str | os.PathLike,
    ks: Sequence[int] | None = None,
    marks: dict[tuple, str] | None = None,
    notes: str | None = None,
) -> list[dict[str, Any]]:
    """Write `table2.md` and `table2.csv` into `out_dir` (atomically); return the table rows.

    `table2.md` holds the paper's view at every cut-off `ks` (None: every cut-off the jobs
    computed, R@1 first; a dataset's gold metrics where it has no answer strings, as
    `table2_metrics` chooses and its first line says), then the answer recall within the
    first l retrieved words (`AR@l`, l = 50/100/200/500 where computed), `marks` appended to
    the cells of both (see `table2_markdown`) and `notes` (the decision rule and the tests)
    after them. Every column of both tables is in `table2_full.csv`.
    """
    metrics = table2_metrics(rows, ks)
    table = table2_rows(rows, ks, metrics)
    full = table2_rows(rows, metrics=full_metrics(list(rows)))
    shown = set(metric_columns(table))
    extra = [c for c in display_columns(full) if c not in shown]
    out = Path(out_dir)
    with atomic_open(out / "table2.md") as f:
        f.write("Passage recall@k (%) by retriever and retrieval granularity (cf. Table 2). ")
        f.write(metrics_legend(metrics) + "\n\n")
        f.write(table2_markdown(table, marks))
        if missing := missing_cells_markdown(out):
            f.write("\n" + missing)
        if extra:
            f.write(f"\n{answer_recall_legend(rows)}\n\n")
            f.write(table2_markdown(full, marks, extra))
        if notes:
            f.write("\n" + notes.rstrip("\n") + "\n")
    _write_csv(out / "table2.csv", table)
    _write_csv(out / "table2_full.csv", full)
    return table


def print_table2(
    table: Sequence[dict[str, Any]], title: str = "Table 2: passage recall@k (%)"
) -> None:
    """A rich table on stdout in the report vocabulary, one section per retriever, at its
    natural width (no wrapping, no escapes when stdout is a file)."""
    from rich.table import Table

    cols = display_columns(table)
    header, rows = _shown(table, cols, {})
    t = Table(title=title)
    for i, h in enumerate(header):
        t.add_column(h, justify="right" if i >= len(header) - len(cols) else "left")
    for i, (first, cells) in enumerate(rows):
        if first and i:
            t.add_section()
        t.add_row(*cells)
    print(f"{title}\n{render(t)}", flush=True)
