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

With `trainer.strategy=ddp` (not spawn) every rank runs this script: all of them take part in
encoding (inside `load_or_build_searcher`), then the ranks other than 0 return NaN and write
nothing, so one process searches and writes the run dir and W&B.
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf
from rich.table import Table

from densex.analysis.per_question import per_question_rows, write_per_question
from densex.corpus.readers import Skips
from densex.corpus.units import unit_tables
from densex.data.qrels import load_dataset_qrels
from densex.data.questions import load_dataset_questions
from densex.metrics.answers import has_answer
from densex.metrics.rank import gold_columns, gold_metrics
from densex.pipelines.fusion import (
    cell_searcher,
    cell_units_file,
    fused_retrieval,
    fusion_keys,
    is_rrf,
)
from densex.pipelines.index import build_corpus_units, generates_propositions
from densex.pipelines.propositions import run as run_propositions
from densex.qa.cell import CURVE_FILE, qa_metrics, read_curve
from densex.retrieval.search import fetch_units_for_words, retrieve_passages
from densex.utils.distributed import global_rank
from densex.utils.integrity import configure as configure_cache
from densex.utils.integrity import remove_orphans
from densex.utils.io import DataError, atomic_open, write_jsonl
from densex.utils.json_stream import JsonStream
from densex.utils.logging import get_logger, render
from densex.utils.progress import track

log = get_logger(__name__)

CONFIG_KEYS = ("corpus", "retriever", "granularity", "dataset", "reader", "index")


def cell_keys(cfg: DictConfig) -> dict[str, Any]:
    """The cell's identity: the chosen config of each group (Hydra's choice, else its `name`)."""
    choices: dict[str, Any] = {}
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            choices = dict(HydraConfig.get().runtime.choices)
    except ImportError:  # pragma: no cover - hydra is a dependency
        pass
    keys: dict[str, Any] = {}
    for group in CONFIG_KEYS:
        node = cfg.get(group)
        name = node.get("name") if isinstance(node, DictConfig) else None
        keys[group] = choices.get(group) or name or (node if isinstance(node, str) else None)
    keys["budget"] = cfg.get("budget")
    return keys


def recall_at_each_k(hits: np.ndarray) -> np.ndarray:
    """recall@k for k = 1..K from a [n_questions, K] has_answer matrix (rank order)."""
    if hits.size == 0:
        return np.zeros(hits.shape[1] if hits.ndim == 2 else 0)
    return np.logical_or.accumulate(hits, axis=1).mean(axis=0)


def run(cfg: DictConfig) -> float:
    """Evaluate one cell, write its files into `cfg.paths.output_dir`, return recall@20.
    `task=propositions` runs the propositionizer quality report instead (its set-F1)."""
    if str((cfg.get("task") or {}).get("name", "retrieval")) == "propositions":
        return run_propositions(cfg)

    configure_cache(cfg.get("cache"))  # verification / shard-size policy for this process
    t_start = time.perf_counter()
    out_dir = Path(cfg.paths.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_orphans(out_dir)  # temp files of a killed earlier attempt in this run dir
    topk = sorted({int(k) for k in cfg.topk})
    if not topk or topk[0] < 1:
        raise ValueError(f"topk must be a non-empty list of cut-offs >= 1, got {list(cfg.topk)}")
    times: dict[str, float] = {}
    cell = _open_cell(cfg, times)
    if global_rank() != 0:
        log.info("rank %d: encoding done; rank 0 evaluates and writes the results", global_rank())
        return float("nan")
    questions, q_info = _questions(cfg)
    results = _search(cfg, cell, questions, topk[-1], times)
    per_q: dict[str, list] = {}
    with_text = bool(cfg.get("retrieval_text", False))
    t0 = time.perf_counter()
    gz = ".gz" if with_text or cfg.get("retrieval_gzip", True) else ""
    hits, samples = write_retrieval_files(
        out_dir, gz, questions, results, cell.passages, topk[-1],
        str(cfg.dataset.get("match", "string")), with_text, int(cfg.get("log_samples", 0) or 0),
    )  # fmt: skip
    curve = recall_at_each_k(hits)
    times["match"] = time.perf_counter() - t0
    # percent, as the paper's tables and the QA metrics
    metrics: dict[str, Any] = {f"recall@{k}": round(100.0 * float(curve[k - 1]), 4) for k in topk}
    metrics.update(_gold_metrics(cfg, cell.passages, questions, results, topk, per_q))
    t0 = time.perf_counter()
    metrics.update(_qa(cfg, cell, questions, results, out_dir, per_q))
    times["qa"] = time.perf_counter() - t0
    row = {
        **cell.keys,
        **metrics,
        "n_questions": len(questions),
        **q_info,
        "n_units": len(cell.units),
        "n_passages": len(cell.passages),
        **{f"time_{k}_s": round(v, 3) for k, v in times.items()},
        "time_total_s": round(time.perf_counter() - t_start, 3),
    }
    _write_cell_files(cfg, out_dir, row, curve, questions, hits, topk, per_q)
    print_metrics(row)
    _log_wandb(cfg, row, samples, cell.units, results, curve)
    return optimized_metric_value(cfg, metrics, topk)


def optimized_metric_value(cfg: DictConfig, metrics: dict[str, Any], topk: list[int]) -> float:
    """The value Hydra sweepers optimise: `cfg.optimized_metric` (e.g. recall@20, em@100), else
    recall at the largest cut-off up to 20."""
    name = cfg.get("optimized_metric")
    if name and name in metrics:
        return float(metrics[name])
    if name:
        log.warning("optimized_metric %r is not among this cell's metrics; using recall@k", name)
    target = max([k for k in topk if k <= 20], default=topk[0])
    return metrics[f"recall@{target}"]


@dataclass
class Cell:
    """What one cell searches: its units (memory-mapped), their passages, the searcher."""

    keys: dict[str, Any]
    units_path: Path
    passages: Any  # corpus.columnar.ArrowTable
    units: Any  # corpus.columnar.ArrowTable
    unit_passage_rows: np.ndarray
    unit_words: np.ndarray
    searcher: Any


def _open_cell(cfg: DictConfig, times: dict[str, float]) -> Cell:
    """Units (cached, shared by every job of a sweep) and the searcher over them (every rank
    takes part in encoding under ddp)."""

    keys = {**cell_keys(cfg), **fusion_keys(cfg)}  # fused cells: labels say what was fused
    t0 = time.perf_counter()
    unit_files = build_corpus_units(cfg, with_generated=generates_propositions(cfg))
    units_path = cell_units_file(cfg, unit_files)  # mixed / RRF: the members' units combined
    passages, units = unit_tables(units_path)
    if passages is None:
        raise DataError(units_path, None, None, "no passages table beside this units file")
    times["units"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    searcher = cell_searcher(cfg, unit_files, units_path)
    times["index"] = time.perf_counter() - t0
    cell = Cell(keys, units_path, passages, units, units.numpy("passage_row"),
                units.numpy("words").astype(np.int64), searcher)  # fmt: skip
    return cell


def _questions(cfg: DictConfig) -> tuple[list[dict], dict[str, Any]]:
    """The dataset's questions (`limit_questions` first) and what loading them skipped."""

    limit = cfg.get("limit_questions")
    unmatchable: list = []  # regex answers that NFD breaks: kept (as DPR does), counted
    q_skips = Skips(cfg.dataset.get("on_error") or "raise")  # on_error=skip: counted in the row
    questions = load_dataset_questions(
        cfg.dataset, limit=int(limit) if limit else None, unmatchable=unmatchable, skips=q_skips
    )
    if not questions:
        raise DataError(str(cfg.dataset.get("path", cfg.dataset)), None, None, "no questions")
    info = {
        "n_unmatchable_answers": len(unmatchable),
        "n_questions_skipped": q_skips.total,
        "questions_skipped_by_field": dict(q_skips.by_field),
    }
    return questions, info


def _search(
    cfg: DictConfig, cell: Cell, questions: list[dict], k: int, times: dict[str, float]
) -> list[Any]:
    """Top-k passages per question by max over units, with units covering the words QA reads."""

    t0 = time.perf_counter()
    searcher = cell.searcher
    if int(searcher.ntotal) != len(cell.units):
        raise DataError(cell.units_path, None, None,
                        f"the index has {searcher.ntotal} units, the units file {len(cell.units)}")  # fmt: skip
    # the QA metrics read this many words of ranked units
    need_words = max(int(cfg.budget), int(cfg.get("recall_curve_max_words", 500)))
    # first fetch sized by units per passage, so fine-grained indexes rarely need a second
    # search, and by the words QA reads, so coarse units with a small topk need none either
    ratio = int(np.ceil(len(cell.units) / max(1, len(cell.passages))))
    words = cell.unit_words
    avg_words = max(1.0, float(words.mean())) if len(words) else 1.0
    n_start = max(k * ratio + 1, int(np.ceil(need_words / avg_words)) + 1)
    queries = [q["question"] for q in questions]
    rows = cell.unit_passage_rows
    if is_rrf(cfg):
        results = fused_retrieval(cfg, searcher, queries, rows, words, k, need_words)
    else:
        results = retrieve_passages(searcher, queries, rows, k, n_start=n_start)
        fetch_units_for_words(searcher, queries, results, words, need_words)
    times["search"] = time.perf_counter() - t0
    return results


def _qa(cfg, cell: Cell, questions, results, out_dir: Path, per_q) -> dict[str, Any]:
    """Answer recall by words and (with a reader) EM@budget over each question's ranked units;
    only the units within the words QA reads are fetched."""

    budget, max_words = int(cfg.budget), int(cfg.get("recall_curve_max_words", 500))
    need = max(budget, max_words)
    ranked_unit_texts = []
    for r in results:
        rows = r.unit_rows
        covered = np.cumsum(cell.unit_words[rows]) if len(rows) else np.zeros(0, np.int64)
        keep = int(np.searchsorted(covered, need, side="left")) + 1  # through the unit reaching it
        ranked_unit_texts.append(cell.units.take("text", rows[:keep]))
    qa = qa_metrics(
        questions,
        ranked_unit_texts,
        cfg.get("reader"),
        budget,
        max_words,
        out_dir,
        match_type=str(cfg.dataset.get("match", "string")),
        per_question=per_q,
    )
    return qa or {}


def _write_cell_files(cfg, out_dir: Path, row, curve, questions, hits, topk, per_q) -> None:
    """recall_at_k.csv, per_question.jsonl, results.jsonl and the answer-recall plot."""

    with atomic_open(out_dir / "recall_at_k.csv") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["k", "recall"])
        w.writerows([[k + 1, round(100.0 * float(v), 4)] for k, v in enumerate(curve)])
    write_per_question(out_dir, per_question_rows(questions, hits, topk, per_q))
    write_jsonl(out_dir / "results.jsonl", [row])
    plot_cell(out_dir, int(cfg.budget))


def write_retrieval_files(
    out_dir: Path, gz: str, questions: list[dict], results: list[Any], passages: Any, K: int,
    match: str, with_text: bool, n_samples: int = 0,
) -> tuple[np.ndarray, list[dict]]:  # fmt: skip
    """Stream `retrieval.json{gz}` (DPR) and `retrieval.pyserini.json{gz}` row by row, marking
    DPR's has_answer on each retrieved passage (text fetched only for those rows); return the
    [n_questions, K] has_answer matrix and the first `n_samples` DPR rows (W&B samples)."""

    hits = np.zeros((len(questions), K), dtype=bool)
    ids = question_keys(questions)
    samples: list[dict] = []
    with (
        JsonStream(out_dir / f"retrieval.json{gz}", "[") as dpr,
        JsonStream(out_dir / f"retrieval.pyserini.json{gz}", "{") as pyserini,
    ):
        pairs = track(list(zip(questions, results)), "answers in passages", unit="questions")
        for qi, (q, r) in enumerate(pairs):
            rows = r.passage_rows
            texts = passages.take("text", rows)
            titles = passages.take("title", rows) if with_text else [None] * len(rows)
            pids = passages.take("id", rows)
            ctxs, contexts = [], []
            for rank, score in enumerate(short_floats(r.passage_scores)):
                hit = bool(has_answer(q["answers"], texts[rank], match))
                hits[qi, rank] = hit
                ctx = {"id": pids[rank]}
                row = {"docid": pids[rank], "score": score}
                if with_text:
                    ctx |= {"title": titles[rank] or "", "text": texts[rank]}
                    row["text"] = pyserini_text(titles[rank], texts[rank])
                ctxs.append({**ctx, "score": score, "has_answer": hit})
                contexts.append({**row, "has_answer": hit})
            dpr_row = {"id": q.get("id"), "question": q["question"], "answers": q["answers"],
                       "ctxs": ctxs}  # fmt: skip
            dpr.item(dpr_row)
            pyserini.item({"question": q["question"], "answers": q["answers"],
                           "contexts": contexts}, key=ids[qi])  # fmt: skip
            if len(samples) < n_samples:
                samples.append(dpr_row)
    return hits, samples


def question_keys(questions: list[dict]) -> list[str]:
    """The keys of retrieval.pyserini.json: question ids, or indexes when ids are missing or
    repeated (with a warning)."""
    ids = [str(q["id"]) if q.get("id") is not None else None for q in questions]
    if None in ids or len(set(ids)) != len(ids):
        log.warning("question ids missing or repeated: retrieval.pyserini.json keys by index")
        ids = [str(i) for i in range(len(questions))]
    return ids


def pyserini_text(title: str | None, text: str) -> str:
    """pyserini's `--combine-title-text` context: "title\\ntext" (its evaluator matches answers
    after the newline, so newlines inside title or text become spaces)."""
    return " ".join(str(title or "").split("\n")) + "\n" + " ".join(text.split("\n"))


def _gold_metrics(cfg, passages, questions, results, topk, per_q) -> dict[str, Any]:
    """MRR@10, nDCG@10, gold_recall@k (percent) against the dataset's `qrels` (when it has
    any); per-question gold rank / rr@10 / ndcg@10 go into `per_q`."""

    qrels = load_dataset_qrels(cfg.dataset, list(passages.iter_rows(("id", "text"))))
    if qrels is None:
        return {}
    ranked = [passages.take("id", r.passage_rows) for r in results]
    gold = [qrels.get(str(q.get("id")), {}) for q in questions]
    per_q.update(gold_columns(ranked, gold))
    return gold_metrics(ranked, gold, ks=topk)


def short_floats(values: np.ndarray) -> list[float]:
    """float32 scores as the shortest decimals that round-trip to the same float32 (what the
    index computed, without float64 noise digits: smaller, better-compressed files)."""
    return [float(x) for x in np.asarray(values, np.float32).astype(str)]


def plot_cell(out_dir: Path, budget: int) -> Path | None:
    """`answer_recall_by_words.png` of this one cell (a sweep's callback plots them all)."""
    from densex.report.plots import plot_answer_recall  # matplotlib: only when plotting

    if not (out_dir / CURVE_FILE).exists():
        return None
    return plot_answer_recall([out_dir], out_dir / "answer_recall_by_words.png", budgets=(budget,))


def print_metrics(row: dict[str, Any]) -> None:
    """The cell's metrics as a table, logged (so it is in the console and in `evaluate.log`)."""

    title = " / ".join(str(row[k]) for k in ("retriever", "granularity", "dataset"))
    t = Table(title=title)
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k, v in row.items():
        if k in CONFIG_KEYS or k == "budget" or v is None:
            continue
        if isinstance(v, float) and k.startswith(("recall@", "em@", "answer_recall@")):
            t.add_row(k, f"{v:.1f}")
        else:
            t.add_row(k, str(v))
    log.info("metrics of %s\n%s", title, render(t))


def _log_wandb(cfg: DictConfig, row, dpr_rows, units, results, curve) -> None:
    from densex.report.wandb_log import init_run, log_cell, run_name  # wandb: only with a logger

    run = init_run(
        cfg,
        save_dir=cfg.paths.output_dir,
        name=run_name(row, cfg),
        job_type="evaluate",
        config=OmegaConf.to_container(cfg, resolve=True),
    )
    if run is None:
        return
    samples = []
    for q, r in zip(dpr_rows, results):  # the first `log_samples` rows
        top = q["ctxs"][0] if q["ctxs"] else {}
        samples.append(
            {
                "question": q["question"],
                "answers": "; ".join(q["answers"]),
                "top_unit": units.take("text", r.unit_rows[:1])[0] if len(r.unit_rows) else "",
                "top_passage": (
                    f"{top.get('title', '')}: {top['text']}" if "text" in top else top.get("id", "")
                ),
                "top_has_answer": top.get("has_answer", False),
                "first_hit_rank": next(
                    (i + 1 for i, c in enumerate(q["ctxs"]) if c["has_answer"]), None
                ),
            }
        )

    curve_path = Path(cfg.paths.output_dir) / CURVE_FILE
    answer_recall = read_curve(curve_path) if curve_path.exists() else None
    log_cell(run, row, samples, curve, answer_recall)
    run.finish()
