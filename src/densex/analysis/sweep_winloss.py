"""Per-question wins and losses between a sweep's compared cells (`winloss.csv` / `.md`).

For every pair of cells `analysis.cells` compares, the questions only A (or only B) answers
in the top k, per bucket of question length, answer type and entity popularity
(`per_question.win_loss`), with example questions.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from densex.analysis.cells import BASELINES, BLOCK_FIELDS, cell_label, granularity_pairs
from densex.analysis.per_question import (
    PER_QUESTION_FILE,
    examples_json,
    read_per_question,
    win_loss,
)
from densex.report.naming import labelled
from densex.utils.io import atomic_open
from densex.utils.records import Record


def sweep_winloss(
    rows: Sequence[Record],
    ks: Sequence[int] = (5, 20),
    popularity: Mapping[str, float] | None = None,
    baselines: Sequence[str] = BASELINES,
    n_examples: int = 3,
) -> list[dict[str, Any]]:
    """Win/loss rows for every compared pair of cells (as `sweep_significance` pairs them) on
    the metrics the cells have (`winloss_metrics`: `hit@k` for each k in `ks`, or MRR@10's
    gold-in-top-10 for a dataset without answer strings)."""
    blocks: dict[tuple, dict[str, Record]] = {}
    for row in rows:
        block = tuple(cell_label(row.get(f)) for f in BLOCK_FIELDS)
        blocks.setdefault(block, {}).setdefault(str(row["granularity"]), row)
    out = []
    cache: dict[str, dict] = {}
    for block, cells in blocks.items():
        for a, b in granularity_pairs(list(cells), baselines):
            da, db = str(cells[a]["job_dir"]), str(cells[b]["job_dir"])
            if not all((Path(d) / PER_QUESTION_FILE).exists() for d in (da, db)):
                continue
            for d in (da, db):
                if d not in cache:
                    cache[d] = read_per_question(d)
            for metric in winloss_metrics(cache[da], ks):
                for r in win_loss(cache[da], cache[db], metric, n_examples, popularity):
                    out.append({**dict(zip(BLOCK_FIELDS, block)), "a": a, "b": b,
                                "metric": metric, **r})  # fmt: skip
    return out


def winloss_metrics(per_question: Mapping[str, Record], ks: Sequence[int]) -> list[str]:
    """The 0/1 per-question metrics a cell has: `hit@k` for `ks` (answer strings), else (no
    answer strings: BEIR) `rr@10` (> 0: a gold passage in the top 10), else none."""
    first = next(iter(per_question.values()), {})
    hits = [f"hit@{k}" for k in ks if f"hit@{k}" in first]
    return hits or (["rr@10"] if "rr@10" in first else [])


WINLOSS_FIELDS = (
    *BLOCK_FIELDS, "a", "b", "metric", "bucketing", "bucket", "n", "wins", "losses", "both",
    "neither", "win_examples", "loss_examples",
)  # fmt: skip


def write_winloss(wl: Sequence[Record], out_dir: str | os.PathLike, n_examples: int = 2) -> Path:
    """`winloss.csv` (all rows, in the report vocabulary of `report.naming`; examples as JSON
    lists) and `winloss.md` (one table per pair and metric where some question differs,
    examples of the first `n_examples` per bucket; the pairs and metrics on which every
    question scores alike are named in one line instead of a table of zeros)."""
    out = Path(out_dir)
    with atomic_open(out / "winloss.csv") as f:
        w = csv.DictWriter(f, fieldnames=WINLOSS_FIELDS, lineterminator="\n")
        w.writeheader()
        for r in wl:
            w.writerow({**labelled(r), "win_examples": examples_json(r["win_examples"]),
                        "loss_examples": examples_json(r["loss_examples"])})  # fmt: skip
    groups: dict[tuple, list[Record]] = {}
    for r in wl:
        key = (*(r[f] for f in BLOCK_FIELDS), r["a"], r["b"], r["metric"])
        groups.setdefault(key, []).append(r)
    parts = ["Per-question wins and losses: A wins = only A has an answer-bearing passage in the"
             " top k (R@k; MRR@10 for a dataset without answer strings: only A has a gold"
             " passage in the top 10); buckets by question length, answer type (first gold"
             " answer: date / number / entity / other) and entity popularity where known.\n"]  # fmt: skip
    same = []
    for key, rs in groups.items():
        x = labelled(dict(zip((*BLOCK_FIELDS, "a", "b", "metric"), key)))
        title = f"{x['retriever']} {x['dataset']}: {x['a']} vs {x['b']}, {x['metric']}"
        if not any(r["wins"] or r["losses"] for r in rs):
            same.append(title)
            continue
        parts.append(
            f"\n### {title}\n\n| Bucketing | Bucket | n | A wins | B wins | both | "
            "neither | A-win examples | B-win examples |\n|---|---|---:|---:|---:|---:|---:|---|---|"
        )
        for r in rs:
            ex_w = "; ".join(_cell(q) for q in r["win_examples"][:n_examples])
            ex_l = "; ".join(_cell(q) for q in r["loss_examples"][:n_examples])
            parts.append(
                f"| {r['bucketing']} | {r['bucket']} | {r['n']} | {r['wins']} | {r['losses']} "
                f"| {r['both']} | {r['neither']} | {ex_w} | {ex_l} |"
            )
    if same:
        parts.append(f"\nNo question differs (no table): {'; '.join(same)}.")
    with atomic_open(out / "winloss.md") as f:
        f.write("\n".join(parts) + "\n")
    return out / "winloss.md"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")
