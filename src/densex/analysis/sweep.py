"""A finished sweep's analysis: paired significance between its cells, win/loss by question
type, and the gold-passage rank metrics, written beside Table 2/3 (`analyze_sweep`).

Cells are compared within a block that shares everything but the granularity (corpus, index,
retriever, dataset; plus reader and budget for EM@l): every granularity against each of the
baselines `passage`, `sentence`, `proposition` that precedes it in the table's order, on the
per-question `hit@k` (Table 2's cut-offs), `em@l` and, with gold passages, `rr@10` (MRR@10).
Outputs in the sweep dir:
- `significance.csv`: one row per (block, a, b, metric): n, means, diff (points), 95% bootstrap
  CI, bootstrap and randomization p-values;
- `table2.md` / `table3.md` rewritten with markers (`†` better than passage, `‡` better than
  sentence at p < alpha by the randomization test; `*`/`**` on the Δ row: p < alpha / alpha/5)
  and the comparisons listed under the table;
- `winloss.csv` / `winloss.md`: wins/losses of a vs b per bucket (question length, answer type,
  entity popularity) with example questions;
- `gold_metrics.md` / `.csv` when cells carry MRR@10 / nDCG@10 (datasets with qrels).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from densex.analysis.per_question import (
    PER_QUESTION_FILE,
    examples_json,
    load_popularity,
    paired_scores,
    read_per_question,
    win_loss,
)
from densex.analysis.significance import N_RESAMPLES, paired_test, significance_mark
from densex.report.naming import GRANULARITY_ORDER, display_name, ordered
from densex.report.table2 import (
    GAIN,
    find_results,
    load_results,
    mark_key,
    table2_rows,
    write_table2,
)
from densex.report.table3 import table3_rows, write_table3
from densex.utils.io import atomic_open
from densex.utils.logging import get_logger

log = get_logger(__name__)

BASELINES = ("passage", "sentence", "proposition")
BLOCK_FIELDS = ("corpus", "index", "retriever", "dataset")
QA_FIELDS = ("reader", "budget")
MARKS = {"passage": "†", "sentence": "‡"}


def _label(value: Any) -> str | None:
    if isinstance(value, Mapping):
        value = value.get("name")
    return None if value is None else str(value)


def _pairs(grans: Sequence[str], baselines: Sequence[str]) -> list[tuple[str, str]]:
    order = ordered(grans, GRANULARITY_ORDER)
    return [
        (a, b)
        for b in baselines
        if b in order
        for a in order
        if a != b and order.index(a) > order.index(b)
    ]


def sweep_significance(
    rows: Sequence[Mapping[str, Any]],
    ks: Sequence[int] = (5, 20),
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    baselines: Sequence[str] = BASELINES,
) -> list[dict[str, Any]]:
    """Significance rows (see the module doc) for the cells of `rows` (results rows with
    `job_dir`) whose run dirs hold `per_question.jsonl`."""
    per_q: dict[str, dict] = {}

    def cell(row: Mapping[str, Any]) -> dict | None:
        d = str(row.get("job_dir"))
        if d not in per_q:
            per_q[d] = read_per_question(d) if (Path(d) / PER_QUESTION_FILE).exists() else None
        return per_q[d]

    # retrieval metrics: one cell per (block, granularity) (budget/reader repeats share it)
    blocks: dict[tuple, dict[str, Mapping[str, Any]]] = {}
    qa_blocks: dict[tuple, dict[str, Mapping[str, Any]]] = {}
    for row in rows:
        block = tuple(_label(row.get(f)) for f in BLOCK_FIELDS)
        blocks.setdefault(block, {}).setdefault(str(row["granularity"]), row)
        if any(str(k).startswith("em@") for k in row):
            qb = (*block, *(_label(row.get(f)) for f in QA_FIELDS))
            qa_blocks.setdefault(qb, {}).setdefault(str(row["granularity"]), row)
    out: list[dict[str, Any]] = []
    for groups, metrics_of in (
        (blocks, lambda r: [f"hit@{k}" for k in ks] + ["rr@10"]),
        (qa_blocks, lambda r: sorted(k for k in r if str(k).startswith("em@"))),
    ):
        for block, cells in groups.items():
            for a, b in _pairs(list(cells), baselines):
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


def write_significance(sig: Sequence[Mapping[str, Any]], out_dir: str | os.PathLike) -> Path:
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


def _metric_label(metric: str) -> str:
    if metric.startswith("hit@"):
        return "R@" + metric[4:]
    if metric.startswith("em@"):
        return "EM@" + metric[3:]
    if metric == "rr@10":
        return "MRR@10"
    return metric


def comparisons_markdown(
    sig: Sequence[Mapping[str, Any]], alpha: float = 0.05, metrics_prefix: tuple = ("hit@", "rr@")
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
            f"{_metric_label(r['metric'])} | {r['mean_a']:.1f} | {r['mean_b']:.1f} | "
            f"{r['diff']:+.1f}{mark} | [{r['ci_low']:+.1f}, {r['ci_high']:+.1f}] | "
            f"{_p(r['p_bootstrap'])} | {_p(r['p_randomization'])} |"
        )
    return "\n".join(lines) + "\n" if n else ""


def _p(p: float) -> str:
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"


def table2_marks(
    sig: Sequence[Mapping[str, Any]], table: Sequence[Mapping[str, Any]], alpha: float = 0.05
) -> dict[tuple, str]:
    """Markers for `write_table2(marks=)`: `†`/`‡` on a granularity's R@k significantly above
    passage / sentence; `*`/`**` on the Δ prop − psg row when that difference is significant."""
    varying = {c for c in ("corpus", "index") if table and c in table[0]}
    marks: dict[tuple, str] = {}
    for r in sig:
        if not str(r["metric"]).startswith("hit@"):
            continue
        col = f"{r['dataset']} R@{r['metric'][4:]}"
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
    sig: Sequence[Mapping[str, Any]], header: Sequence[str], alpha: float = 0.05
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


def sweep_winloss(
    rows: Sequence[Mapping[str, Any]],
    ks: Sequence[int] = (5, 20),
    popularity: Mapping[str, float] | None = None,
    baselines: Sequence[str] = BASELINES,
    n_examples: int = 3,
) -> list[dict[str, Any]]:
    """Win/loss rows for every compared pair of cells (as `sweep_significance` pairs them) on
    `hit@k` for each k in `ks`."""
    blocks: dict[tuple, dict[str, Mapping[str, Any]]] = {}
    for row in rows:
        block = tuple(_label(row.get(f)) for f in BLOCK_FIELDS)
        blocks.setdefault(block, {}).setdefault(str(row["granularity"]), row)
    out = []
    cache: dict[str, dict] = {}
    for block, cells in blocks.items():
        for a, b in _pairs(list(cells), baselines):
            da, db = str(cells[a]["job_dir"]), str(cells[b]["job_dir"])
            if not all((Path(d) / PER_QUESTION_FILE).exists() for d in (da, db)):
                continue
            for d in (da, db):
                if d not in cache:
                    cache[d] = read_per_question(d)
            for k in ks:
                for r in win_loss(cache[da], cache[db], f"hit@{k}", n_examples, popularity):
                    out.append({**dict(zip(BLOCK_FIELDS, block)), "a": a, "b": b,
                                "metric": f"hit@{k}", **r})  # fmt: skip
    return out


WINLOSS_FIELDS = (
    *BLOCK_FIELDS, "a", "b", "metric", "bucketing", "bucket", "n", "wins", "losses", "both",
    "neither", "win_examples", "loss_examples",
)  # fmt: skip


def write_winloss(
    wl: Sequence[Mapping[str, Any]], out_dir: str | os.PathLike, n_examples: int = 2
) -> Path:
    """`winloss.csv` (all rows; examples as JSON lists) and `winloss.md` (one table per pair
    and metric, examples of the first `n_examples` per bucket)."""
    out = Path(out_dir)
    with atomic_open(out / "winloss.csv") as f:
        w = csv.DictWriter(f, fieldnames=WINLOSS_FIELDS, lineterminator="\n")
        w.writeheader()
        for r in wl:
            w.writerow({**r, "win_examples": examples_json(r["win_examples"]),
                        "loss_examples": examples_json(r["loss_examples"])})  # fmt: skip
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in wl:
        groups.setdefault((*(r[f] for f in BLOCK_FIELDS), r["a"], r["b"], r["metric"]), []).append(
            r
        )
    parts = ["Per-question wins and losses: A wins = only A has an answer-bearing passage in the"
             " top k; buckets by question length, answer type (first gold answer: date /"
             " number / entity / other) and entity popularity where known.\n"]  # fmt: skip
    for key, rs in groups.items():
        corpus, index, retriever, dataset, a, b, metric = key
        parts.append(
            f"\n### {display_name(str(retriever))} {dataset}: {a} vs {b}, "
            f"{_metric_label(metric)}\n\n| Bucketing | Bucket | n | A wins | B wins | both | "
            "neither | A-win examples | B-win examples |\n|---|---|---:|---:|---:|---:|---:|---|---|"
        )
        for r in rs:
            ex_w = "; ".join(_cell(q) for q in r["win_examples"][:n_examples])
            ex_l = "; ".join(_cell(q) for q in r["loss_examples"][:n_examples])
            parts.append(
                f"| {r['bucketing']} | {r['bucket']} | {r['n']} | {r['wins']} | {r['losses']} "
                f"| {r['both']} | {r['neither']} | {ex_w} | {ex_l} |"
            )
    with atomic_open(out / "winloss.md") as f:
        f.write("\n".join(parts) + "\n")
    return out / "winloss.md"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


GOLD_COLUMNS = ("recall@5", "recall@20", "gold_recall@5", "gold_recall@20", "mrr@10", "ndcg@10")


def write_gold_table(rows: Sequence[Mapping[str, Any]], out_dir: str | os.PathLike) -> Path | None:
    """`gold_metrics.md` / `.csv`: answer-string recall beside the gold-passage metrics, one
    line per cell with `mrr@10`; None when no cell has gold passages."""
    cells = [r for r in rows if r.get("mrr@10") is not None]
    if not cells:
        return None
    seen, lines = set(), []
    for r in cells:
        key = tuple(_label(r.get(f)) for f in (*BLOCK_FIELDS, "granularity"))
        if key not in seen:
            seen.add(key)
            lines.append(r)
    cols = [c for c in GOLD_COLUMNS if any(c in r for r in lines)]
    out = Path(out_dir)
    with atomic_open(out / "gold_metrics.csv") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["retriever", "granularity", "dataset", *cols])
        for r in lines:
            w.writerow(
                [r["retriever"], r["granularity"], r["dataset"], *(r.get(c, "") for c in cols)]
            )
    label = {"recall@5": "R@5 (answer)", "recall@20": "R@20 (answer)", "gold_recall@5": "R@5 (gold)",
             "gold_recall@20": "R@20 (gold)", "mrr@10": "MRR@10", "ndcg@10": "nDCG@10"}  # fmt: skip
    md = [
        "Answer-string recall (DPR has_answer) beside rank metrics against the gold passages (%).\n",
        "| Retriever | Granularity | Dataset | " + " | ".join(label[c] for c in cols) + " |",
        "|---|---|---|" + "---:|" * len(cols),
    ]
    for r in lines:
        vals = [f"{float(r[c]):.1f}" if r.get(c) is not None else "–" for c in cols]
        md.append(f"| {display_name(str(r['retriever']))} | {r['granularity']} | {r['dataset']} | "
                  + " | ".join(vals) + " |")  # fmt: skip
    with atomic_open(out / "gold_metrics.md") as f:
        f.write("\n".join(md) + "\n")
    return out / "gold_metrics.md"


def analyze_sweep(
    sweep_dir: str | os.PathLike,
    ks: Sequence[int] = (5, 20),
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    alpha: float = 0.05,
    popularity: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Write the sweep's significance, win/loss and gold tables, and Table 2/3 with markers."""

    sweep_dir = Path(sweep_dir)
    paths = find_results(sweep_dir)
    if not paths:
        log.warning("no results.jsonl under %s: nothing to analyse", sweep_dir)
        return {}
    rows = load_results(paths)
    ks = [k for k in ks if any(f"recall@{k}" in r for r in rows)]
    written: dict[str, Any] = {}
    sig = sweep_significance(rows, ks, n_resamples, seed)
    written["significance"] = write_significance(sig, sweep_dir)
    legend = (
        f"Paired tests on the same questions ({n_resamples:,} seeded resamples): Δ = A − B in "
        f"points, 95% paired-bootstrap CI, bootstrap and randomization p-values. Markers "
        f"(randomization test): † better than passage, ‡ better than sentence at p < {alpha}; "
        f"on the Δ row * p < {alpha}, ** p < {alpha / 5:g}. No correction for multiple "
        "comparisons.\n\n"
    )
    if ks:
        table = table2_rows(rows, ks)
        notes = comparisons_markdown(sig, alpha)
        write_table2(rows, sweep_dir, ks, table2_marks(sig, table, alpha),
                     legend + notes if notes else None)  # fmt: skip
        written["table2"] = sweep_dir / "table2.md"
    if any(str(k).startswith("em@") for r in rows for k in r):
        header, _ = table3_rows(rows)
        notes = comparisons_markdown(sig, alpha, ("em@",))
        written["table3"] = write_table3(
            rows, sweep_dir, table3_marks(sig, header, alpha), legend + notes if notes else None
        )
    pop = load_popularity(popularity) if popularity else None
    wl = sweep_winloss(rows, ks, pop)
    if wl:
        written["winloss"] = write_winloss(wl, sweep_dir)
    gold = write_gold_table(rows, sweep_dir)
    if gold:
        written["gold"] = gold
    log.info("analysis: %d paired tests, %d win/loss rows in %s", len(sig), len(wl), sweep_dir)
    return written
