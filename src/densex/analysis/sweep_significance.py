"""Paired significance between a sweep's cells and the markers it puts on Table 2/3.

`sweep_significance` runs `significance.paired_test` on every compared pair of cells (see
`analysis.cells`) for the per-question `hit@k` (Table 2's cut-offs), `em@l` and, with gold
passages, `rr@10` (MRR@10); `write_significance` writes `significance.csv` (one row per
(block, a, b, metric): n, means, diff in points, 95% bootstrap CI, bootstrap and randomization
p-values); `comparisons_markdown` lists them under a table; `table2_marks` / `table3_marks`
give the markers (`†` better than passage, `‡` better than sentence at p < alpha by the
randomization test; `*`/`**` on the Δ row: p < alpha / alpha/5).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from densex.analysis.cells import (
    BASELINES,
    BLOCK_FIELDS,
    QA_FIELDS,
    cell_label,
    granularity_pairs,
    metric_label,
)
from densex.analysis.per_question import PER_QUESTION_FILE, paired_scores, read_per_question
from densex.analysis.significance import N_RESAMPLES, paired_test, significance_mark
from densex.report.naming import display_name
from densex.report.table2 import GAIN, mark_key
from densex.utils.io import atomic_open
from densex.utils.records import Record

MARKS = {"passage": "†", "sentence": "‡"}


def sweep_significance(
    rows: Sequence[Record],
    ks: Sequence[int] = (5, 20),
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    baselines: Sequence[str] = BASELINES,
) -> list[dict[str, Any]]:
    """Significance rows (see the module doc) for the cells of `rows` (results rows with
    `job_dir`) whose run dirs hold `per_question.jsonl`."""
    per_q: dict[str, dict] = {}

    def cell(row: Record) -> dict | None:
        d = str(row.get("job_dir"))
        if d not in per_q:
            per_q[d] = read_per_question(d) if (Path(d) / PER_QUESTION_FILE).exists() else None
        return per_q[d]

    # retrieval metrics: one cell per (block, granularity) (budget/reader repeats share it)
    blocks: dict[tuple, dict[str, Record]] = {}
    qa_blocks: dict[tuple, dict[str, Record]] = {}
    for row in rows:
        block = tuple(cell_label(row.get(f)) for f in BLOCK_FIELDS)
        blocks.setdefault(block, {}).setdefault(str(row["granularity"]), row)
        if any(str(k).startswith("em@") for k in row):
            qb = (*block, *(cell_label(row.get(f)) for f in QA_FIELDS))
            qa_blocks.setdefault(qb, {}).setdefault(str(row["granularity"]), row)
    out: list[dict[str, Any]] = []
    for groups, metrics_of in (
        (blocks, lambda r: [f"hit@{k}" for k in ks] + ["rr@10"]),
        (qa_blocks, lambda r: sorted(k for k in r if str(k).startswith("em@"))),
    ):
        for block, cells in groups.items():
            for a, b in granularity_pairs(list(cells), baselines):
                ca, cb = cell(cells[a]), cell(cells[b])
                if ca is None or cb is None:
                    continue
                for metric in metrics_of(cells[a]):
                    ids, sa, sb = paired_scores(ca, cb, metric)
                    if not ids:
                        continue
                    t = paired_test(sa, sb, n_resamples=n_resamples, seed=seed)
                    info = dict(zip(BLOCK_FIELDS, block))
                    if len(block) > len(BLOCK_FIELDS):
                        info.update(zip(QA_FIELDS, block[len(BLOCK_FIELDS) :]))
                    out.append({**info, "a": a, "b": b, "metric": metric, **t.as_dict()})
    return out


SIG_FIELDS = (
    *BLOCK_FIELDS, *QA_FIELDS, "a", "b", "metric", "n", "mean_a", "mean_b", "diff", "ci_low",
    "ci_high", "p_bootstrap", "p_randomization", "exact", "n_resamples",
)  # fmt: skip


def write_significance(sig: Sequence[Record], out_dir: str | os.PathLike) -> Path:
    """`significance.csv` (floats rounded to 4 decimals, p-values to 6)."""
    path = Path(out_dir) / "significance.csv"
    with atomic_open(path) as f:
        w = csv.DictWriter(f, fieldnames=SIG_FIELDS, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        for r in sig:
            w.writerow(
                {
                    k: (round(v, 6 if k.startswith("p_") else 4) if isinstance(v, float) else v)
                    for k, v in r.items()
                }
            )
    return path


def comparisons_markdown(
    sig: Sequence[Record], alpha: float = 0.05, metrics_prefix: tuple = ("hit@", "rr@")
) -> str:
    """The comparisons as a Markdown table: Δ (points), 95% CI, both p-values."""
    lines = [
        "| Retriever | Dataset | A vs B | Metric | A | B | Δ | 95% CI | p boot | p rand |",
        "|---|---|---|---|---:|---:|---:|---|---:|---:|",
    ]
    n = 0
    for r in sig:
        if not str(r["metric"]).startswith(metrics_prefix):
            continue
        n += 1
        mark = significance_mark(r["p_randomization"], alpha)
        lines.append(
            f"| {display_name(str(r['retriever']))} | {r['dataset']} | {r['a']} vs {r['b']} | "
            f"{metric_label(r['metric'])} | {r['mean_a']:.1f} | {r['mean_b']:.1f} | "
            f"{r['diff']:+.1f}{mark} | [{r['ci_low']:+.1f}, {r['ci_high']:+.1f}] | "
            f"{_p(r['p_bootstrap'])} | {_p(r['p_randomization'])} |"
        )
    return "\n".join(lines) + "\n" if n else ""


def _p(p: float) -> str:
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"


def table2_marks(
    sig: Sequence[Record], table: Sequence[Record], alpha: float = 0.05
) -> dict[tuple, str]:
    """Markers for `write_table2(marks=)`: `†`/`‡` on a granularity's R@k (MRR@10 for a dataset
    without answer strings, where the table shows it) significantly above passage / sentence;
    `*`/`**` on the Δ prop − psg row when that difference is significant."""
    varying = {c for c in ("corpus", "index") if table and c in table[0]}
    marks: dict[tuple, str] = {}
    columns = set(table[0]) if table else set()
    for r in sig:
        metric = str(r["metric"])
        if metric.startswith("hit@"):
            col = f"{r['dataset']} R@{metric[4:]}"
        elif metric == "rr@10":  # a dataset without answer strings shows MRR@10 instead
            col = f"{r['dataset']} MRR@10"
        else:
            continue
        if col not in columns:
            continue
        labels = {"retriever": r["retriever"]}
        labels.update({c: r[c] for c in varying})
        p = r["p_randomization"]
        if r["b"] in MARKS and p < alpha and r["diff"] > 0:
            key = mark_key({**labels, "granularity": r["a"]}, col)
            marks[key] = marks.get(key, "") + MARKS[r["b"]]
        if (r["a"], r["b"]) == ("proposition", "passage"):
            mark = significance_mark(p, alpha)
            if mark:
                marks[mark_key({**labels, "granularity": GAIN}, col)] = mark
    return marks


def table3_marks(
    sig: Sequence[Record], header: Sequence[str], alpha: float = 0.05
) -> dict[tuple, str]:
    """Markers for `write_table3(marks=)`: `†`/`‡` on an EM@l significantly above passage /
    sentence (keys: retriever, the varying conditions as the table shows them, granularity)."""
    labels = list(header[: header.index("granularity") + 1])
    marks: dict[tuple, str] = {}
    for r in sig:
        if not str(r["metric"]).startswith("em@") or r["b"] not in MARKS:
            continue
        if r["p_randomization"] < alpha and r["diff"] > 0:
            vals = {**r, "granularity": r["a"]}
            key = (*(vals.get(c) for c in labels), f"{r['dataset']} EM@{r['metric'][3:]}")
            marks[key] = marks.get(key, "") + MARKS[r["b"]]
    return marks
