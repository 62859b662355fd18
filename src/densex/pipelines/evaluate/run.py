"""One benchmark cell: (corpus, retriever, granularity, dataset[, budget, reader]).

units (cached) -> unit index (cached) -> max-over-units passage search -> passage recall@k with
DPR's has_answer -> QA under a word budget. Writes into the run dir:
- `results.jsonl`: one row, the cell's config keys + metrics (what the sweep callback reads);
- `retrieval.json.gz`: DPR's retrieval-results format (a list of `{question, answers, ctxs:
  [{id, score, has_answer}]}`, + `title`, `text` with `retrieval_text=true`), what DPR's
  reader and evaluators read (after `gunzip -k`; `retrieval_gzip=false` writes plain JSON);
- `retrieval.pyserini.json.gz`: the same passages in pyserini's format (`{qid: {question,
  answers, contexts: [{docid, score, has_answer}]}}`, + `text: "title\\ntext"` with
  `retrieval_text=true`), which `python -m pyserini.eval.evaluate_dpr_retrieval --retrieval
  FILE --topk 5 20` reads once decompressed;
- `recall_at_k.csv`: recall@k for k = 1..max(topk);
- `answer_recall_by_words.csv` and its plot `answer_recall_by_words.png` (+ `em@{budget}` in
  the row when a reader is set).
Recall, EM and answer recall are percentages, as in the paper's tables. Returns recall@20 (or
the largest cut-off below it) so Hydra sweepers can optimise it.

Metrics exist only where they are defined: a dataset whose questions carry no answer strings
(BEIR, any qrels-only set) gets no has_answer recall@k, answer recall or EM (the keys are
absent from its row, `recall_at_k.csv` and the curve are not written, its retrieval files
carry no `has_answer`); its gold-passage metrics (nDCG@10, MRR@10, gold_recall@k) lead its
row and it returns nDCG@10. Such a dataset without qrels has no metric at all: a `DataError`
before the search.

With `trainer.strategy=ddp` (not spawn) every rank runs this script: all of them take part in
encoding (inside `load_or_build_searcher`), then the ranks other than 0 return NaN and write
nothing, so one process searches and writes the run dir and W&B.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from densex.data.questions import has_answer_strings
from densex.pipelines.edge import cache_spec, dataset_spec
from densex.pipelines.evaluate.cell import Cell, load_questions, open_cell, search_cell
from densex.pipelines.evaluate.metrics import cell_gold_metrics, cell_qa_metrics, recall_at_each_k
from densex.pipelines.evaluate.outputs import log_wandb, print_metrics, write_cell_files
from densex.pipelines.evaluate.retrieval_files import write_retrieval_files
from densex.pipelines.plan.run import planned_disk_bytes
from densex.pipelines.propositions.run import run as run_propositions
from densex.utils.distributed import global_rank
from densex.utils.integrity import configure as configure_cache
from densex.utils.integrity import remove_orphans
from densex.utils.io import disk_full_reported
from densex.utils.logging import get_logger

log = get_logger(__name__)


def run(cfg: DictConfig) -> float:
    """Evaluate one cell, write its files into `cfg.paths.output_dir`, return recall@20.
    `task=propositions` runs the propositionizer quality report instead (its set-F1)."""
    if str((cfg.get("task") or {}).get("name", "retrieval")) == "propositions":
        return run_propositions(cfg)

    configure_cache(
        cache_spec(cfg.get("cache"))
    )  # verification / shard-size policy for this process
    # a full disk ends in one line: the file, the planner's estimate and the space free
    with disk_full_reported(cfg.paths.cache_dir, lambda: planned_disk_bytes(cfg)):
        return _run_cell(cfg)


def _run_cell(cfg: DictConfig) -> float:
    """`run`'s retrieval cell: units, searcher, search, metrics, the run dir's files."""
    t_start = time.perf_counter()
    out_dir = Path(cfg.paths.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_orphans(out_dir)  # temp files of a killed earlier attempt in this run dir
    topk = cutoffs(cfg)
    times: dict[str, float] = {}
    cell = open_cell(cfg, times)
    if global_rank() != 0:
        log.info("rank %d: encoding done; rank 0 evaluates and writes the results", global_rank())
        return float("nan")
    questions, q_info = load_questions(cfg)
    answers = has_answers(cfg, questions)
    results = search_cell(cfg, cell, questions, topk[-1], times)
    per_q: dict[str, list] = {}
    hits, samples, curve = match_answers(cfg, out_dir, cell, questions, results, topk[-1], times)
    if not answers:
        hits, curve = None, None  # has_answer is undefined without answer strings
    metrics = cell_metrics(cfg, cell, questions, results, topk, curve, out_dir, per_q, times)
    row = cell_row(cell, metrics, questions, q_info, times, t_start)
    write_cell_files(cfg, out_dir, row, curve, questions, hits, topk, per_q)
    print_metrics(row)
    log_wandb(cfg, row, samples, cell.units, results, curve)
    return optimized_metric_value(cfg, metrics, topk)


def cutoffs(cfg: DictConfig) -> list[int]:
    """The sorted distinct `topk` cut-offs; a `ValueError` unless all are >= 1."""
    topk = sorted({int(k) for k in cfg.topk})
    if not topk or topk[0] < 1:
        raise ValueError(f"topk must be a non-empty list of cut-offs >= 1, got {list(cfg.topk)}")
    return topk


def has_answers(cfg: DictConfig, questions: list[dict]) -> bool:
    """`data.questions.has_answer_strings` for the cell's dataset, logged when it is False."""
    if has_answer_strings(questions, dataset_spec(cfg.dataset)):
        return True
    log.info("%s: no answer strings; gold-passage metrics only", cfg.dataset.get("name"))
    return False


def match_answers(
    cfg: DictConfig, out_dir: Path, cell: Cell, questions: list[dict], results: list[Any],
    k: int, times: dict[str, float],
) -> tuple[Any, list[dict], Any]:  # fmt: skip
    """Write the retrieval files (DPR's has_answer on each of the top `k` passages); return
    the has_answer matrix, the W&B sample rows and recall@1..k."""
    with_text = bool(cfg.get("retrieval_text", False))
    t0 = time.perf_counter()
    gz = ".gz" if with_text or cfg.get("retrieval_gzip", True) else ""
    hits, samples = write_retrieval_files(
        out_dir, gz, questions, results, cell.passages, k,
        str(cfg.dataset.match), with_text, int(cfg.get("log_samples", 0) or 0),
    )  # fmt: skip
    curve = recall_at_each_k(hits)
    times["match"] = time.perf_counter() - t0
    return hits, samples, curve


def cell_metrics(
    cfg: DictConfig, cell: Cell, questions: list[dict], results: list[Any], topk: list[int],
    curve: Any, out_dir: Path, per_q: dict[str, list], times: dict[str, float],
) -> dict[str, Any]:  # fmt: skip
    """recall@k for each cut-off, gold-passage metrics and QA metrics (all percent); with
    `curve` None (no answer strings) the gold metrics alone."""
    gold = cell_gold_metrics(cfg, cell.passages, questions, results, topk, per_q)
    if curve is None:  # no answer strings: the gold metrics lead the row, nDCG@10 first
        lead = [k for k in ("ndcg@10", "mrr@10") if k in gold]
        return {**{k: gold[k] for k in lead}, **{k: v for k, v in gold.items() if k not in lead}}
    # percent, as the paper's tables and the QA metrics
    metrics: dict[str, Any] = {f"recall@{k}": round(100.0 * float(curve[k - 1]), 4) for k in topk}
    metrics.update(gold)
    t0 = time.perf_counter()
    metrics.update(cell_qa_metrics(cfg, cell, questions, results, out_dir, per_q))
    times["qa"] = time.perf_counter() - t0
    return metrics


def cell_row(
    cell: Cell, metrics: dict[str, Any], questions: list[dict], q_info: dict[str, Any],
    times: dict[str, float], t_start: float,
) -> dict[str, Any]:  # fmt: skip
    """The `results.jsonl` row: the cell's keys, metrics, counts and stage seconds."""
    return {
        **cell.keys,
        **metrics,
        "n_questions": len(questions),
        **q_info,
        "n_units": len(cell.units),
        "n_passages": len(cell.passages),
        **{f"time_{k}_s": round(v, 3) for k, v in times.items()},
        "time_total_s": round(time.perf_counter() - t_start, 3),
    }


def optimized_metric_value(cfg: DictConfig, metrics: dict[str, Any], topk: list[int]) -> float:
    """The value Hydra sweepers optimise: `cfg.optimized_metric` (e.g. recall@20, em@100), else
    recall at the largest cut-off up to 20, else (no answer strings) nDCG@10."""
    name = cfg.get("optimized_metric")
    if name and name in metrics:
        return float(metrics[name])
    target = max([k for k in topk if k <= 20], default=topk[0])
    fallback = f"recall@{target}" if f"recall@{target}" in metrics else "ndcg@10"
    if name:
        log.warning("optimized_metric %r is not defined for this cell; using %s", name, fallback)
    return float(metrics.get(fallback, float("nan")))
