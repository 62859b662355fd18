"""The one vocabulary of every result file: order and display names shared by every writer
(Table 2/3 Markdown and CSV, significance, win/loss, gold metrics, the figures, W&B).

Paper order first (Chen et al. 2023, Tables 2-3), then our extra retrievers and datasets;
anything unknown follows in order of first appearance. Labels:

- retrievers by the paper's spelling (`minilm` -> `MiniLM`, `tasb` -> `TAS-B`; others as
  configured), datasets by `DATASET_LABEL` (others as configured: `demo`), granularities as
  configured (`passage`, `sentence`, `proposition`) and the gain row `GAIN_LABEL`;
- metrics (`metric_label`): results-row keys and per-question keys alike, `recall@5` and
  `hit@5` -> `R@5`, `answer_recall@100` / `ar@100` -> `AR@100`, `em@100` -> `EM@100`,
  `mrr@10` / `rr@10` -> `MRR@10`, `ndcg@10` -> `nDCG@10`, `gold_recall@5` -> `gR@5`;
- a table column: `"{dataset label} {metric label}"` (`column_label`; `split_column` parts it);
- a metric on the questions with a short answer (`qa.short_answers`: key `<metric>_short<N>`):
  its label then ` (≤N-word answers)`: `answer_recall@100_short5` -> `AR@100 (≤5-word answers)`.

Files keep the results-row keys only where they are data for programs (`results.jsonl`,
`per_question.jsonl`); every table, CSV and W&B table or summary uses these labels.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from densex.qa.short_answers import short_key, split_short_key
from densex.utils.records import Record

RETRIEVER_ORDER = ("simcse", "contriever", "dpr", "ance", "tasb", "gtr", "bm25", "minilm")
GRANULARITY_ORDER = ("passage", "sentence", "proposition")
DATASET_ORDER = ("nq", "tqa", "webq", "squad", "eq", "curated", "squad-open", "squad-train", "demo")

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
    "squad-train": "SQuAD-train",
}
RETRIEVER_LABEL = {r: DISPLAY[r] for r in RETRIEVER_ORDER}
# the dataset part of column labels ("NQ R@5"); other datasets keep their config name
DATASET_LABEL = {
    d: DISPLAY[d] for d in ("nq", "tqa", "webq", "squad", "eq", "squad-open", "squad-train")
}

GAIN = "gain"  # the table rows' key of the proposition - passage row
GAIN_LABEL = "Δ prop − psg"  # how every file names that row (and the gain column)

# results-row / per-question key prefix -> the label's prefix; `hit@k` (per question) is the
# question's contribution to `recall@k`, `ar@l` to `answer_recall@l`, `rr@10` to `mrr@10`
_METRIC_PREFIX = (
    ("answer_recall@", "AR@"),
    ("gold_recall@", "gR@"),
    ("recall@", "R@"),
    ("hit@", "R@"),
    ("ar@", "AR@"),
    ("em@", "EM@"),
    ("mrr@", "MRR@"),
    ("rr@", "MRR@"),
    ("ndcg@", "nDCG@"),
)
METRIC_LABEL = re.compile(r"^(R|AR|gR|EM|MRR|nDCG)@\d+$")  # every label `metric_label` gives
# ... and after it, for a metric on the short-answer questions
SHORT_LABEL = re.compile(r"^(?P<metric>\S+) \(≤(?P<words>\d+)-word answers\)$")


def metric_label(key: str) -> str:
    """The label of a metric key (see the module doc); a key that is already a label, or is
    no metric, is returned unchanged."""
    key = str(key)
    base, words = split_short_key(key)
    if words is not None:
        return f"{metric_label(base)} (≤{words}-word answers)"
    for prefix, label in _METRIC_PREFIX:
        if key.startswith(prefix) and key[len(prefix) :].isdigit():
            return label + key[len(prefix) :]
    return key


def retriever_label(key: Any) -> str:
    """`minilm` -> `MiniLM` (the paper's spelling); an unknown retriever as configured."""
    return RETRIEVER_LABEL.get(str(key), str(key))


def dataset_label(key: Any) -> str:
    """`squad-open` -> `SQuAD-open`; a dataset without a paper spelling as configured."""
    return DATASET_LABEL.get(str(key), str(key))


def granularity_label(key: Any) -> str:
    """A granularity as configured; the gain row (`GAIN`) as `GAIN_LABEL`."""
    return GAIN_LABEL if key == GAIN else str(key)


def split_column(column: str) -> tuple[str, str]:
    """`(dataset, metric)` of a table column `"{dataset} {metric}"` (dataset "" when it has
    none); a short-answer label's own spaces stay in the metric."""
    column = str(column)
    short = re.search(r" \(≤\d+-word answers\)$", column)
    head, tail = (column[: short.start()], short[0]) if short else (column, "")
    dataset, _, metric = head.rpartition(" ")
    return dataset, metric + tail


def answer_recall_metrics(columns: Iterable[str]) -> list[str]:
    """The per-question keys of a table's answer-recall columns, in order: `ar@100` for
    `"{dataset} AR@100"`, `ar@100_short5` for `"{dataset} AR@100 (≤5-word answers)"`
    (`analysis.per_question.question_score` scores both); each once."""
    out: list[str] = []
    for column in columns:
        metric = split_column(column)[1]
        short = SHORT_LABEL.match(metric)
        base = short["metric"] if short else metric
        if not re.fullmatch(r"AR@\d+", base):
            continue
        key = f"ar@{base[3:]}"
        key = short_key(key, int(short["words"])) if short else key
        if key not in out:
            out.append(key)
    return out


def column_label(column: str) -> str:
    """A table column `"{dataset} {metric}"` as shown: `"squad-open recall@5"` -> `"SQuAD-open
    R@5"`; `Avg` columns keep `Avg`."""
    dataset, metric = split_column(column)
    if not dataset:
        return metric_label(metric)
    return f"{dataset if dataset == 'Avg' else dataset_label(dataset)} {metric_label(metric)}"


LABELLERS = {
    "retriever": retriever_label,
    "dataset": dataset_label,
    "granularity": granularity_label,
    "a": granularity_label,
    "b": granularity_label,
    "metric": metric_label,
}


def labelled(row: Record) -> dict[str, Any]:
    """A table or CSV row in the vocabulary: label fields (`LABELLERS`) mapped, metric columns
    renamed by `column_label`, other fields (corpus, index, reader, numbers) unchanged."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key in LABELLERS:
            out[key] = LABELLERS[key](value) if value is not None else value
        elif " " in str(key) or "@" in str(key):
            out[column_label(key)] = value
        else:
            out[key] = value
    return out


def ordered(values: Iterable[str], order: Sequence[str]) -> list[str]:
    """Distinct `values`: those in `order` in that order, then the rest as they first appear."""
    seen = list(dict.fromkeys(values))
    return [v for v in order if v in seen] + [v for v in seen if v not in order]


def order_index(value: str, order: Sequence[str]) -> int:
    """Sort key: the position in `order`, unknown values after every known one."""
    return order.index(value) if value in order else len(order)


def display_name(key: str) -> str:
    """A figure's legend/title spelling of a retriever, dataset or granularity (`tasb` ->
    `TAS-B`, `squad-open` -> `SQuAD-open`, others as configured)."""
    return DISPLAY.get(key, key)
