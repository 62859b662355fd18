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
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from densex.utils.io import DataError, atomic_open, read_jsonl, write_json, write_jsonl
from densex.utils.logging import get_logger
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


def load_units(
    units_path: str | Path, passages_path: str | Path
) -> tuple[list[dict], list[dict], np.ndarray]:
    """Passages, units, and `unit_passage_rows` (the passage row of every unit row)."""
    passages = list(read_jsonl(passages_path, nonempty=("id",), required=("text",)))
    row_of = {p["id"]: i for i, p in enumerate(passages)}
    units, rows = [], []
    for lineno, u in enumerate(
        read_jsonl(units_path, nonempty=("id", "passage_id", "text")), start=1
    ):
        if u["passage_id"] not in row_of:
            raise DataError(
                units_path, lineno, "passage_id", f"unknown passage {u['passage_id']!r}"
            )
        rows.append(row_of[u["passage_id"]])
        units.append(u)
    return passages, units, np.asarray(rows, dtype=np.int64)


def recall_at_each_k(hits: np.ndarray) -> np.ndarray:
    """recall@k for k = 1..K from a [n_questions, K] has_answer matrix (rank order)."""
    if hits.size == 0:
        return np.zeros(hits.shape[1] if hits.ndim == 2 else 0)
    return np.logical_or.accumulate(hits, axis=1).mean(axis=0)


def run(cfg: DictConfig) -> float:
    """Evaluate one cell, write its files into `cfg.paths.output_dir`, return recall@20.
    `task=propositions` runs the propositionizer quality report instead (its set-F1)."""
    if str((cfg.get("task") or {}).get("name", "retrieval")) == "propositions":
        from densex.pipelines.propositions import run as run_propositions

        return run_propositions(cfg)
    from densex.corpus.readers import Skips
    from densex.data.questions import load_dataset_questions
    from densex.metrics.answers import has_answer
    from densex.pipelines.fusion import cell_searcher, cell_units_file, fusion_keys, is_rrf
    from densex.pipelines.index import build_corpus_units, generates_propositions, global_rank
    from densex.qa.cell import qa_metrics
    from densex.retrieval.search import fetch_units_for_words, retrieve_passages
    from densex.utils.integrity import configure as configure_cache
    from densex.utils.integrity import remove_orphans

    configure_cache(cfg.get("cache"))  # verification / shard-size policy for this process
    t_start = time.perf_counter()
    out_dir = Path(cfg.paths.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_orphans(out_dir)  # temp files of a killed earlier attempt in this run dir
    topk = sorted({int(k) for k in cfg.topk})
    if not topk or topk[0] < 1:
        raise ValueError(f"topk must be a non-empty list of cut-offs >= 1, got {list(cfg.topk)}")
    K = topk[-1]
    keys = {**cell_keys(cfg), **fusion_keys(cfg)}  # fused cells: labels say what was fused

    # units: built once per corpus content, shared by every job of a sweep
    t0 = time.perf_counter()
    unit_files = build_corpus_units(cfg, with_generated=generates_propositions(cfg))
    units_path = cell_units_file(cfg, unit_files)  # mixed / RRF: the members' units combined
    passages, units, unit_passage_rows = load_units(units_path, unit_files.passages)
    t_units = time.perf_counter() - t0

    t0 = time.perf_counter()
    searcher = cell_searcher(cfg, unit_files, units_path)
    if global_rank() != 0:
        log.info("rank %d: encoding done; rank 0 evaluates and writes the results", global_rank())
        return float("nan")
    if list(searcher.unit_ids) != [u["id"] for u in units]:
        raise DataError(units_path, None, "id", "the index's unit ids differ from the units file")
    t_index = time.perf_counter() - t0

    limit = cfg.get("limit_questions")
    unmatchable: list = []  # regex answers that NFD breaks: kept (as DPR does), counted
    q_skips = Skips(cfg.dataset.get("on_error") or "raise")  # on_error=skip: counted in the row
    questions = load_dataset_questions(
        cfg.dataset, limit=int(limit) if limit else None, unmatchable=unmatchable, skips=q_skips
    )
    if not questions:
        raise DataError(str(cfg.dataset.get("path", cfg.dataset)), None, None, "no questions")

    t0 = time.perf_counter()
    budget = int(cfg.budget)
    max_words = int(cfg.get("recall_curve_max_words", 500))
    need_words = max(budget, max_words)  # the QA metrics read this many words of ranked units
    unit_words = np.fromiter((len(u["text"].split()) for u in units), np.int64, len(units))
    # first fetch sized by units per passage, so fine-grained indexes rarely need a second
    # search, and by the words QA reads, so coarse units with a small topk need none either
    ratio = int(np.ceil(len(units) / max(1, len(passages))))
    avg_words = max(1.0, float(unit_words.mean())) if len(units) else 1.0
    n_start = max(K * ratio + 1, int(np.ceil(need_words / avg_words)) + 1)
    queries = [q["question"] for q in questions]
    if is_rrf(cfg):
        from densex.pipelines.fusion import fused_retrieval

        results = fused_retrieval(
            cfg, searcher, queries, unit_passage_rows, unit_words, K, need_words
        )
    else:
        results = retrieve_passages(searcher, queries, unit_passage_rows, K, n_start=n_start)
        fetch_units_for_words(searcher, queries, results, unit_words, need_words)
    t_search = time.perf_counter() - t0

    t0 = time.perf_counter()
    match = str(cfg.dataset.get("match", "string"))
    with_text = bool(cfg.get("retrieval_text", False))
    hits = np.zeros((len(questions), K), dtype=bool)
    dpr_rows = []
    for qi, (q, r) in enumerate(
        track(list(zip(questions, results)), "answers in passages", unit="questions")
    ):
        ctxs = []
        for rank, (p, s) in enumerate(zip(r.passage_rows.tolist(), short_floats(r.passage_scores))):
            psg = passages[p]
            hit = bool(has_answer(q["answers"], psg["text"], match))
            hits[qi, rank] = hit
            ctx = {"id": psg["id"]}
            if with_text:
                ctx |= {"title": psg.get("title", ""), "text": psg["text"]}
            ctxs.append({**ctx, "score": s, "has_answer": hit})
        dpr_rows.append(
            {"id": q.get("id"), "question": q["question"], "answers": q["answers"], "ctxs": ctxs}
        )
    pyserini = pyserini_retrieval(dpr_rows, passages, results, with_text)
    curve = recall_at_each_k(hits)
    t_match = time.perf_counter() - t0

    # percent, as the paper's tables and the QA metrics
    metrics: dict[str, Any] = {f"recall@{k}": round(100.0 * float(curve[k - 1]), 4) for k in topk}

    per_q: dict[str, list] = {}
    metrics.update(_gold_metrics(cfg, passages, questions, results, topk, per_q))

    t0 = time.perf_counter()
    ranked_unit_texts = [[units[u]["text"] for u in r.unit_rows.tolist()] for r in results]
    qa = qa_metrics(
        questions,
        ranked_unit_texts,
        cfg.get("reader"),
        budget,
        max_words,
        out_dir,
        match_type=match,
        per_question=per_q,
    )
    metrics.update(qa or {})
    t_qa = time.perf_counter() - t0

    row = {
        **keys,
        **metrics,
        "n_questions": len(questions),
        "n_unmatchable_answers": len(unmatchable),
        "n_questions_skipped": q_skips.total,
        "questions_skipped_by_field": dict(q_skips.by_field),
        "n_units": len(units),
        "n_passages": len(passages),
        "time_units_s": round(t_units, 3),
        "time_index_s": round(t_index, 3),
        "time_search_s": round(t_search, 3),
        "time_match_s": round(t_match, 3),
        "time_qa_s": round(t_qa, 3),
        "time_total_s": round(time.perf_counter() - t_start, 3),
    }
    gz = ".gz" if with_text or cfg.get("retrieval_gzip", True) else ""
    write_json(out_dir / f"retrieval.json{gz}", dpr_rows, indent=None)
    write_json(out_dir / f"retrieval.pyserini.json{gz}", pyserini, indent=None)
    with atomic_open(out_dir / "recall_at_k.csv") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["k", "recall"])
        w.writerows([[k + 1, round(100.0 * float(v), 4)] for k, v in enumerate(curve)])
    from densex.analysis.per_question import per_question_rows, write_per_question

    write_per_question(out_dir, per_question_rows(questions, hits, topk, per_q))
    write_jsonl(out_dir / "results.jsonl", [row])
    plot_cell(out_dir, budget)

    print_metrics(row)
    _log_wandb(cfg, row, dpr_rows, units, results, curve)
    target = max([k for k in topk if k <= 20], default=topk[0])
    return metrics[f"recall@{target}"]


def _gold_metrics(cfg, passages, questions, results, topk, per_q) -> dict[str, Any]:
    """MRR@10, nDCG@10, gold_recall@k (percent) against the dataset's `qrels` (when it has
    any); per-question gold rank / rr@10 / ndcg@10 go into `per_q`."""
    from densex.data.qrels import load_dataset_qrels
    from densex.metrics.rank import gold_columns, gold_metrics

    qrels = load_dataset_qrels(cfg.dataset, passages)
    if qrels is None:
        return {}
    ranked = [[passages[p]["id"] for p in r.passage_rows.tolist()] for r in results]
    gold = [qrels.get(str(q.get("id")), {}) for q in questions]
    per_q.update(gold_columns(ranked, gold))
    return gold_metrics(ranked, gold, ks=topk)


def pyserini_retrieval(
    dpr_rows: list[dict], passages: list[dict], results: list[Any], with_text: bool
) -> dict[str, dict]:
    """`dpr_rows` in the layout pyserini's `evaluate_dpr_retrieval` reads: a dict keyed by
    question id of `{question, answers, contexts: [{docid, score, text, has_answer}]}`, with
    `text` = "title\\ntext" (its converter's `--combine-title-text`; the evaluator matches
    answers in the part after the newline, so newlines inside title or text become spaces) and
    only when `with_text`; it trusts `has_answer` where present. Ids that are missing or not
    unique fall back to the question's index."""
    ids = [str(q["id"]) if q.get("id") is not None else None for q in dpr_rows]
    if None in ids or len(set(ids)) != len(ids):
        log.warning("question ids missing or repeated: retrieval.pyserini.json keys by index")
        ids = [str(i) for i in range(len(dpr_rows))]
    out: dict[str, dict] = {}
    for qid, q, r in zip(ids, dpr_rows, results):
        contexts = []
        for ctx, p in zip(q["ctxs"], r.passage_rows.tolist()):
            row = {"docid": ctx["id"], "score": ctx["score"]}
            if with_text:
                psg = passages[p]
                title = " ".join(str(psg.get("title") or "").split("\n"))
                row["text"] = title + "\n" + " ".join(psg["text"].split("\n"))
            contexts.append({**row, "has_answer": ctx["has_answer"]})
        out[qid] = {"question": q["question"], "answers": q["answers"], "contexts": contexts}
    return out


def short_floats(values: np.ndarray) -> list[float]:
    """float32 scores as the shortest decimals that round-trip to the same float32 (what the
    index computed, without float64 noise digits: smaller, better-compressed files)."""
    return [float(x) for x in np.asarray(values, np.float32).astype(str)]


def plot_cell(out_dir: Path, budget: int) -> Path | None:
    """`answer_recall_by_words.png` of this one cell (a sweep's callback plots them all)."""
    from densex.qa.cell import CURVE_FILE
    from densex.report.plots import plot_answer_recall

    if not (out_dir / CURVE_FILE).exists():
        return None
    return plot_answer_recall([out_dir], out_dir / "answer_recall_by_words.png", budgets=(budget,))


def print_metrics(row: dict[str, Any]) -> None:
    """The cell's metrics as a table, logged (so it is in the console and in `evaluate.log`)."""
    from rich.table import Table

    from densex.utils.logging import render

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
    from densex.report.wandb_log import init_run, log_cell, run_name

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
    for q, r in list(zip(dpr_rows, results))[: int(cfg.get("log_samples", 0) or 0)]:
        top = q["ctxs"][0] if q["ctxs"] else {}
        samples.append(
            {
                "question": q["question"],
                "answers": "; ".join(q["answers"]),
                "top_unit": units[int(r.unit_rows[0])]["text"] if len(r.unit_rows) else "",
                "top_passage": (
                    f"{top.get('title', '')}: {top['text']}" if "text" in top else top.get("id", "")
                ),
                "top_has_answer": top.get("has_answer", False),
                "first_hit_rank": next(
                    (i + 1 for i, c in enumerate(q["ctxs"]) if c["has_answer"]), None
                ),
            }
        )
    from densex.qa.cell import CURVE_FILE, read_curve

    curve_path = Path(cfg.paths.output_dir) / CURVE_FILE
    answer_recall = read_curve(curve_path) if curve_path.exists() else None
    log_cell(run, row, samples, curve, answer_recall)
    run.finish()
