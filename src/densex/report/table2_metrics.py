"""Which metrics Table 2 shows for each dataset: the ones its cells have.

A dataset whose questions carry answer strings has passage recall@k (DPR has_answer) in its
rows and gets `R@k` columns (the paper's Table 2) and, in the full table, answer recall at l
words (`AR@l`); a dataset without answer strings (BEIR, any qrels-only set) has no such keys
(they are undefined, not zero) and gets its gold-passage metrics instead: nDCG@10, MRR@10 and
gold recall@k (`gR@k`). `metrics_legend` says which, for the table's first line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from densex.qa.short_answers import short_key
from densex.report.naming import dataset_label, metric_label

__all__ = [
    "ANSWER_RECALL_WORDS",
    "GOLD_METRICS",
    "Metrics",
    "datasets_of",
    "full_metrics",
    "metrics_legend",
    "short_answer_columns",
    "short_answer_legend",
    "table2_metrics",
]

Metrics = Sequence[tuple[str, str]]  # (column label, results-row key) pairs

# a dataset without answer strings (BEIR): its gold-passage metrics stand in for recall@k
GOLD_METRICS: tuple[tuple[str, str], ...] = (("nDCG@10", "ndcg@10"), ("MRR@10", "mrr@10"))


def datasets_of(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The rows by dataset, in first-seen order."""
    by: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by.setdefault(str(row.get("dataset")), []).append(row)
    return by


def table2_metrics(
    rows: Sequence[dict[str, Any]], ks: Sequence[int] | None = None
) -> dict[str, list]:
    """`{dataset: [(label, row key), ...]}`: the metrics each dataset's cells have. A dataset
    with answer strings (its rows carry `recall@k`) gets `R@k` for `ks` (None: every cut-off
    all its rows have, R@1 first); one without (BEIR, qrels only: no `recall@k` key in any
    row) gets `nDCG@10`, `MRR@10` and gold recall `gR@k`, against its gold passages."""
    out: dict[str, list] = {}
    for d, drows in datasets_of(rows).items():
        if any(k.startswith("recall@") for r in drows for k in r):
            cut = _cutoffs(drows, "recall@") if ks is None else ks
            out[d] = [(f"R@{k}", f"recall@{k}") for k in cut]
        else:
            cut = _cutoffs(drows, "gold_recall@") if ks is None else ks
            gold = [(f"gR@{k}", f"gold_recall@{k}") for k in cut]
            out[d] = [*GOLD_METRICS, *[m for m in gold if any(m[1] in r for r in drows)]]
    return out


def metrics_legend(metrics: dict[str, Metrics]) -> str:
    """What the table's columns measure, naming the datasets that use gold metrics."""
    gold = sorted(d for d, ms in metrics.items() if any(f == "ndcg@10" for _, f in ms))
    parts = []
    if len(gold) < len(metrics):
        parts.append("R@k: passage recall@k (%, DPR has_answer on the answer strings)")
    if gold:
        parts.append(
            f"{', '.join(gold)} (no answer strings): nDCG@10, MRR@10 and gold recall gR@k"
            " (%) against the qrels' gold passages"
        )
    return "; ".join(parts) + "."


# answer recall within the first l retrieved words, as the README's table shows it
ANSWER_RECALL_WORDS = (50, 100, 200, 500)


def full_metrics(
    rows: Sequence[dict[str, Any]], words: Sequence[int] = ANSWER_RECALL_WORDS
) -> dict[str, list[tuple[str, str]]]:
    """Per dataset: every recall cut-off all its rows have (`R@k`), then answer recall at
    `words` (`AR@l`) where every row has it (from the row, else read from its job's curve file
    into it); a dataset without answer strings: nDCG@10, MRR@10 and every gold recall cut-off
    all its rows have (`gR@k`)."""
    # lazy: qa.cell pulls the reader (torch, transformers, Lightning: ~10 s); tables need none
    from densex.qa.cell import CURVE_FILE, read_curve

    for row in rows:
        curve = Path(str(row.get("job_dir", ""))) / CURVE_FILE
        if row.get("job_dir") and curve.exists():
            xs, ys = read_curve(curve)
            at = dict(zip(xs, ys))
            for l_words in words:
                if f"answer_recall@{l_words}" not in row and l_words in at:
                    row[f"answer_recall@{l_words}"] = at[l_words]
    out: dict[str, list[tuple[str, str]]] = {}
    for d, drows in datasets_of(rows).items():
        if any(k.startswith("recall@") for r in drows for k in r):
            ks = _cutoffs(drows, "recall@")
            ls = [w for w in words if all(f"answer_recall@{w}" in r for r in drows)]
            out[d] = [(f"R@{k}", f"recall@{k}") for k in ks] + [
                (f"AR@{w}", f"answer_recall@{w}") for w in ls
            ]
            out[d] += short_answer_columns(drows, words)
        else:
            gold = [(f"gR@{k}", f"gold_recall@{k}") for k in _cutoffs(drows, "gold_recall@")]
            out[d] = [*GOLD_METRICS, *gold]
    return out


def _short_words(rows: Sequence[dict[str, Any]]) -> int | None:
    """The `short_answer_words` N all `rows` share (None: not computed, or not the same)."""
    ns = {r.get("short_answer_words") for r in rows}
    return int(ns.pop()) if len(ns) == 1 and None not in ns else None


def short_answer_columns(
    rows: Sequence[dict[str, Any]], words: Sequence[int] = ANSWER_RECALL_WORDS
) -> list[tuple[str, str]]:
    """One dataset's `(label, key)` pairs of answer recall at `words` on its questions with a
    short answer (`qa.short_answers`: `("AR@100 (≤5-word answers)",
    "answer_recall@100_short5")`), where every row has it (from the row: no curve is kept)."""
    n = _short_words(rows)
    if n is None:
        return []
    keys = [short_key(f"answer_recall@{w}", n) for w in words]
    return [(metric_label(k), k) for k in keys if all(k in r for r in rows)]


def answer_recall_legend(rows: Sequence[dict[str, Any]]) -> str:
    """The answer-recall table's first line, with what its `(≤N-word answers)` columns count."""
    return (
        "Answer recall within the first l retrieved words (AR@l, %: an answer string in the"
        f" first l words of the retrieved units, in rank order){short_answer_legend(rows)}."
    )


def short_answer_legend(rows: Sequence[dict[str, Any]]) -> str:
    """What the `(≤N-word answers)` columns count, per dataset, for the answer-recall table's
    first line ("" when no dataset has them)."""
    parts = []
    for d, drows in datasets_of(rows).items():
        n = _short_words(drows)
        if n is None or not short_answer_columns(drows):
            continue
        kept, total = drows[0].get("n_short_answer_questions"), drows[0].get("n_questions")
        count = f", {kept:,} of {total:,} questions" if kept is not None and total else ""
        parts.append(f"{dataset_label(d)}: N = {n}{count}")
    if not parts:
        return ""
    return (
        "; AR@l (≤N-word answers): the same on the questions whose shortest answer has at"
        f" most N words ({'; '.join(parts)})"
    )


def _cutoffs(rows: Sequence[dict[str, Any]], prefix: str) -> list[int]:
    """The cut-offs k of `{prefix}k` keys that every row has."""
    ks = {int(k[len(prefix) :]) for k in rows[0] if k.startswith(prefix)} if rows else set()
    return sorted(k for k in ks if all(f"{prefix}{k}" in r for r in rows))
