"""What one evaluate cell searches, and the search itself.

Contract: `cell_keys(cfg)` is the cell's identity (the config choice of each group);
`open_cell(cfg, times)` builds or reuses the cell's units and searcher (`Cell`; every rank
takes part in encoding under ddp); `load_questions(cfg)` loads the dataset's questions and
counts what was skipped; `search_cell` returns each question's top-k passages (max over
units) with enough ranked units to cover the words QA reads. Each stage records its seconds
in `times`; bad input raises a located `DataError`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from densex.corpus.readers import Skips
from densex.corpus.units import unit_tables
from densex.data.questions import load_dataset_questions
from densex.pipelines.edge import dataset_spec
from densex.pipelines.evaluate.fusion import (
    cell_searcher,
    cell_units_file,
    fused_retrieval,
    fusion_keys,
    is_rrf,
)
from densex.pipelines.index.units import build_corpus_units, generates_propositions
from densex.retrieval.query_cache import cache_query_vectors
from densex.retrieval.search import fetch_units_for_words, retrieve_passages
from densex.utils.io import DataError

CONFIG_KEYS = ("corpus", "retriever", "granularity", "dataset", "reader", "index")


def cell_keys(cfg: DictConfig) -> dict[str, Any]:
    """The cell's identity: the chosen config of each group (Hydra's choice, else its `name`)."""
    choices: dict[str, Any] = {}
    if HydraConfig.initialized():
        choices = dict(HydraConfig.get().runtime.choices)
    keys: dict[str, Any] = {}
    for group in CONFIG_KEYS:
        node = cfg.get(group)
        name = node.get("name") if isinstance(node, DictConfig) else None
        keys[group] = choices.get(group) or name or (node if isinstance(node, str) else None)
    keys["budget"] = cfg.get("budget")
    if late_suffix(cfg.get("retriever")):  # granularity=sentence-late or the retriever key
        keys["granularity"] = granularity_name(cfg)
    return keys


def late_suffix(retriever: Any) -> str:
    """How late chunking names a cell's units: `-late` (a context other than the passage
    named too: `-late-section`) for a retriever node with `late_chunking`, else ""."""
    if not (isinstance(retriever, DictConfig) and retriever.get("late_chunking")):
        return ""
    context = str(retriever.get("late_context") or "passage")
    return "-late" if context == "passage" else f"-late-{context}"


def granularity_name(cfg: DictConfig) -> str:
    """The granularity a cell searches, as results and the explorer name it: the group's
    `name`, with `late_suffix` (`sentence-late`: a cell of its own)."""
    return f"{cfg.granularity.name}{late_suffix(cfg.get('retriever'))}"


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


def open_cell(cfg: DictConfig, times: dict[str, float]) -> Cell:
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


def load_questions(cfg: DictConfig) -> tuple[list[dict], dict[str, Any]]:
    """The dataset's questions (`limit_questions` first) and what loading them skipped."""

    limit = cfg.get("limit_questions")
    unmatchable: list = []  # regex answers that NFD breaks: kept (as DPR does), counted
    q_skips = Skips(cfg.dataset.on_error)  # on_error=skip: counted in the row
    questions = load_dataset_questions(
        dataset_spec(cfg.dataset),
        limit=int(limit) if limit else None,
        unmatchable=unmatchable,
        skips=q_skips,
    )
    if not questions:
        raise DataError(str(cfg.dataset.path), None, None, "no questions")
    info = {
        "n_unmatchable_answers": len(unmatchable),
        "n_questions_skipped": q_skips.total,
        "questions_skipped_by_field": dict(q_skips.by_field),
    }
    return questions, info


def first_fetch(cell: Cell, k: int, need_words: int) -> int:
    """The units a cell's search fetches first for top-`k` passages: sized by units per
    passage, so fine-grained indexes rarely need a second search, and by the words QA reads
    (`need_words`), so coarse units with a small k need none either."""
    ratio = int(np.ceil(len(cell.units) / max(1, len(cell.passages))))
    words = cell.unit_words
    avg_words = max(1.0, float(words.mean())) if len(words) else 1.0
    return max(k * ratio + 1, int(np.ceil(need_words / avg_words)) + 1)


def search_cell(
    cfg: DictConfig, cell: Cell, questions: list[dict], k: int, times: dict[str, float]
) -> list[Any]:
    """Top-k passages per question by max over units, with units covering the words QA reads.
    Dense retrievers read the questions' cached query embeddings (`retrieval.query_cache`:
    encoded once per question list and query encoder, shared by the cells of a sweep); the
    seconds that takes are `times["queries"]`."""

    searcher = cell.searcher
    if int(searcher.ntotal) != len(cell.units):
        raise DataError(cell.units_path, None, None,
                        f"the index has {searcher.ntotal} units, the units file {len(cell.units)}")  # fmt: skip
    t0 = time.perf_counter()
    queries = [q["question"] for q in questions]
    cache_query_vectors(searcher, queries, cfg.paths.cache_dir)
    times["queries"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    # the QA metrics read this many words of ranked units
    need_words = max(int(cfg.budget), int(cfg.get("recall_curve_max_words", 500)))
    rows, words = cell.unit_passage_rows, cell.unit_words
    if is_rrf(cfg):
        results = fused_retrieval(cfg, searcher, queries, rows, words, k, need_words)
    else:
        n_start = first_fetch(cell, k, need_words)
        results = retrieve_passages(searcher, queries, rows, k, n_start=n_start)
        fetch_units_for_words(searcher, queries, results, words, need_words)
    times["search"] = time.perf_counter() - t0
    return results
