"""Paired significance between a sweep's cells and the markers it puts on Table 2/3.

`sweep_significance` runs `significance.paired_test` on every compared pair of cells (see
`analysis.cells`) for every per-question metric the tables report: `hit@k` (R@k, every cut-off
of Table 2), `ar@l` (AR@l, answer recall within l words), `em@l` (EM@l) and, with gold
passages, `rr@10` (MRR@10) and `ndcg@10` (nDCG@10). One decision rule (`decision_rule`): the
paired randomization test decides at alpha; the 95% paired-bootstrap CI is shown beside it.
`write_significance` writes `significance.csv` (one row per (block, a, b, metric), in the report
vocabulary of `report.naming`: n, means, diff in points, CI, the randomization p-value, whether
it was exact, the bootstrap's resamples, `significant`); `comparisons_markdown` lists them under
a table; `table2_marks` / `table3_marks` give the markers (`†` better than passage, `‡` better
than sentence; `*`/`**` on the Δ row: p < alpha / alpha/5).
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
)
from densex.analysis.per_question import PER_QUESTION_FILE, paired_scores, read_per_question
from densex.analysis.significance import N_RESAMPLES, paired_test, significance_mark
from densex.report.naming import GAIN, GAIN_LABEL, labelled, metric_label
from densex.report.table2 import mark_key
from densex.utils.io import atomic_open
from densex.utils.records import Record

MARKS = {"passage": "†", "sentence": "‡"}


def sweep_significance(
    rows: Sequence[Record],
    ks: Sequence[int] = (5, 20),
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    baselines: Sequence[str] = BASELINES,
    words: Sequence[int] = (),
    answer_metrics: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Significance rows (see the module doc) for the cells of `rows` (results rows with
    `job_dir`) whose run dirs hold `per_question.jsonl`: R@k for `ks`, AR@l for `words` and
    the per-question `answer_metrics` (`ar@100_short5`: AR@100 on the short-answer
    questions, `analysis.per_question.question_score`), MRR@10 and nDCG@10 where the cells
    have them, EM@l (and its short-answer subset) per (reader, budget)."""
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
    retrieval = [f"hit@{k}" for k in ks] + [f"ar@{w}" for w in words] + list(answer_metrics)
    retrieval += ["rr@10", "ndcg@10"]
    out: list[dict[str, Any]] = []
    for groups, metrics_of in (
        (blocks, lambda r: retrieval),
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


def decision_rule(alpha: float = 0.05, n_resamples: int = N_RESAMPLES) -> str:
    """The one decision rule of the sweep's tables, as their notes state it."""
    return (
        "Decision rule: a difference is significant when the paired randomization test (sign"
        f" flips on the same questions, two-sided) gives p < {alpha:g}: exact (every sign flip)"
        f" when the cells differ on few enough questions, else {n_resamples:,} seeded"
        f" resamples. The 95% paired-bootstrap CI ({n_resamples:,} resamples) is shown beside"
        " it for the size of the difference; it does not decide. Δ = A − B in points. Markers:"
        " † better than passage, ‡ better than sentence; on a Δ (the"
        f" {GAIN_LABEL} row, the comparisons below) * p < {alpha:g}, ** p < {alpha / 5:g}."
        " No correction for multiple comparisons.\n\n"
    )


SIG_FIELDS = (
    *BLOCK_FIELDS, *QA_FIELDS, "a", "b", "metric", "n", "mean_a", "mean_b", "diff", "ci_low",
    "ci_high", "p_randomization", "randomization_resamples", "bootstrap_resamples", "significant",
)  # fmt: skip


def significance_record(r: Record, alpha: float = 0.05) -> dict[str, Any]:
    """A significance row as `significance.csv` holds it: labels of the report vocabulary,
    `randomization_resamples` = `exact` (every sign flip enumerated) or the resamples drawn,
    `bootstrap_resamples` (the CI's), `significant` by `decision_rule`; floats rounded (4
    decimals, p-values 6)."""
    row = labelled({k: r.get(k) for k in SIG_FIELDS if k in r or k in QA_FIELDS})
    row["randomization_resamples"] = "exact" if r["exact"] else int(r["n_resamples"])
    row["bootstrap_resamples"] = int(r["n_resamples"])
    row["significant"] = bool(r["p_randomization"] < alpha)
    return {
        k: (round(v, 6 if k.startswith("p_") else 4) if isinstance(v, float) else v)
        for k, v in row.items()
    }


def write_significance(
    sig: Sequence[Record], out_dir: str | os.PathLike, alpha: float = 0.05
) -> Path:
    """`significance.csv` (`significance_record` per row; the `reader` and `budget` columns
    only when some comparison is an EM@l, which has them)."""
    qa = any(r.get(f) is not None for r in sig for f in QA_FIELDS)
    fields = [f for f in SIG_FIELDS if qa or f not in QA_FIELDS]
    path = Path(out_dir) / "significance.csv"
    with atomic_open(path) as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        for r in sig:
            w.writerow(significance_record(r, alpha))
    return path


def comparisons_markdown(
    sig: Sequence[Record],
    alpha: float = 0.05,
    metrics_prefix: tuple = ("hit@", "ar@", "rr@", "ndcg@"),
) -> str:
    """The comparisons as a Markdown table: Δ (points) with its marker, the 95% bootstrap CI,
    the randomization p-value that decides (`decision_rule`)."""
    lines = [
        "| Retriever | Dataset | A vs B | Metric | A | B | Δ | 95% CI (bootstrap) | p (randomization) |",
        "|---|---|---|---|---:|---:|---:|---|---:|",
    ]
    n = 0
    for r in sig:
        if not str(r["metric"]).startswith(metrics_prefix):
            continue
        n += 1
        mark = significance_mark(r["p_randomization"], alpha)
        x = labelled({f: r[f] for f in ("retriever", "dataset", "a", "b", "metric")})
        exact = " (exact)" if r["exact"] else ""
        lines.append(
            f"| {x['retriever']} | {x['dataset']} | {x['a']} vs {x['b']} | {x['metric']} | "
            f"{r['mean_a']:.1f} | {r['mean_b']:.1f} | {r['diff']:+.1f}{mark} | "
            f"[{r['ci_low']:+.1f}, {r['ci_high']:+.1f}] | {_p(r['p_randomization'])}{exact} |"
        )
    return "\n".join(lines) + "\n" if n else ""


def _p(p: float) -> str:
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"


def table2_marks(
    sig: Sequence[Record], table: Sequence[Record], alpha: float = 0.05
) -> dict[tuple, str]:
    """Markers for `write_table2(marks=)` on every column of `table` (rows of `table2_rows`;
    pass the full table for the AR@l columns too) that was tested: `†`/`‡` on a granularity's
    value significantly above passage / sentence; `*`/`**` on the Δ prop − psg row when that
    difference is significant (`decision_rule`)."""
    varying = {c for c in ("corpus", "index") if table and c in table[0]}
    marks: dict[tuple, str] = {}
    columns = set(table[0]) if table else set()
    for r in sig:
        col = f"{r['dataset']} {metric_label(str(r['metric']))}"
        if col not in columns or str(r["metric"]).startswith("em@"):
            continue
        labels = {"retriever": r["retriever"]}
        labels.update({c: r[c] for c in varying})
        p = r["p_randomization"]
        if r["b"] in MARKS and p < alpha and r["diff"] > 0:
            key = mark_key({**labels, "granularity": r["a"]}, col)
            if MARKS[r["b"]] not in marks.get(key, ""):
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
