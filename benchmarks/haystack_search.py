"""Search at haystack size: densex's exact search against plain faiss, side by side in one run.

    .venv/bin/python benchmarks/haystack_search.py            # after the squad-train sentence cell
    .venv/bin/python benchmarks/haystack_search.py --queries 5000 --threads 2
    .venv/bin/python benchmarks/haystack_search.py --queries 50 'corpus.titles.include=[Matter]'

Opens the cell `experiment=squad-train granularity=sentence` through `densex.open_index` (the
units, the unit embeddings and the exact faiss index `python evaluate.py -m
experiment=squad-train` cached; built first, as evaluate.py would, where they are missing;
trailing Hydra overrides change the cell: another granularity, `paths.cache_dir=...`). Its
questions (dataset=squad-train: all 87,599 by default, `--queries N` the first N) are read from
the query-embedding cache the evaluate cells share (encoded once into it where missing),
outside both clocks. Then, on `--threads` threads (1):

1. densex: `retrieval.search.retrieve_passages` over the cell's `ShardedIndex` at its default
   settings: the top `--k` (100) passages by max over units, first fetching the units the
   evaluate cell fetches first for them (`first_fetch`: k x units per passage + 1), doubling
   for the queries whose k passages are not settled;
2. plain: `faiss.IndexFlatIP` over the same embeddings at this faiss build's defaults, its
   top-n units for the same n, then the same max-per-passage step in numpy (a passage's
   score is its best unit's; the first k passages, ties by passage row; the same doubling).

Both must return the same rankings (passages in order; where two scores tie within 1e-5 the
kernels' last-digit differences may swap them, counted and printed); the script fails
otherwise. Prints each side's seconds and ends with `search: densex / plain faiss = R.RRx`
(plain seconds / densex seconds: above 1, densex is faster). Figures are never asserted.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
CELL = ["experiment=squad-train", "granularity=sentence"]
TIE = 1e-5  # scores this close may be ordered apart by BLAS and SIMD kernels


class QueryVectors:
    """A `UnitSearcher` over queries encoded beforehand: query `"i"` is row i of `vectors`."""

    def __init__(self, index, vectors: np.ndarray) -> None:
        self.index, self.vectors = index, vectors

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def search(self, queries: list[str], n: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(self.vectors[[int(q) for q in queries]], n)


def plain_top_passages(
    flat, xq: np.ndarray, passage_of: np.ndarray, k: int, n_start: int, block: int = 2048
) -> tuple[np.ndarray, np.ndarray]:
    """The top-k passages by max over units from `flat.search` and numpy: (rows, scores)
    [nq, k] (-1 / -inf past the passages found), doubling n for unsettled queries."""
    nq, ntotal = len(xq), int(flat.ntotal)
    rows = np.full((nq, k), -1, np.int64)
    scores = np.full((nq, k), -np.inf, np.float32)
    pending, n = np.arange(nq), min(n_start, ntotal)
    while len(pending):
        still = []
        for start in range(0, len(pending), block):
            qs = pending[start : start + block]
            d, i = flat.search(xq[qs], n)
            p, s, ok = max_per_passage(d, i, passage_of, k, exhausted=n >= ntotal)
            rows[qs[ok]], scores[qs[ok]] = p[ok], s[ok]
            still.append(qs[~ok])
        pending, n = np.concatenate(still), min(2 * n, ntotal)
    return rows, scores


def max_per_passage(
    d: np.ndarray, i: np.ndarray, passage_of: np.ndarray, k: int, exhausted: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query of faiss's top-n units (scores `d` best first, rows `i`): the first k distinct
    passages in that order (a passage's score is its first unit's) and whether they are
    settled (k found and the k-th strictly above the last unit's score, or nothing left)."""
    valid = i >= 0
    p = np.where(valid, passage_of[np.maximum(i, 0)], -1)
    n = p.shape[1]
    key = np.sort(p * n + np.arange(n), axis=1)  # by passage, then rank: its first is its best
    first_sorted = np.ones(key.shape, bool)
    first_sorted[:, 1:] = key[:, 1:] // n != key[:, :-1] // n
    first = np.zeros(key.shape, bool)
    np.put_along_axis(first, key % n, first_sorted, axis=1)
    first &= valid
    slot = np.cumsum(first, axis=1) - 1
    r, c = np.nonzero(first & (slot < k))
    top_p = np.full((len(p), k), -1, np.int64)
    top_s = np.full((len(p), k), -np.inf, np.float32)
    top_p[r, slot[r, c]], top_s[r, slot[r, c]] = p[r, c], d[r, c]
    last = np.where(valid, d, np.inf).min(axis=1)
    ok = exhausted | (valid.sum(axis=1) < n) | (top_s[:, -1] > last)
    return top_p, top_s, ok


def same_rankings(results, rows: np.ndarray, scores: np.ndarray) -> tuple[int, int]:
    """(identical rankings, rankings differing only among scores tied within `TIE`); any
    other difference is an AssertionError naming the query."""
    identical = tied = 0
    for q, r in enumerate(results):
        m = len(r.passage_rows)
        ours, theirs = r.passage_rows, rows[q, :m]
        assert (rows[q, m:] == -1).all(), f"query {q}: plain faiss found more passages"
        if np.array_equal(ours, theirs):
            identical += 1
            continue
        close = np.allclose(r.passage_scores, scores[q, :m], atol=TIE, rtol=0)
        moved = ours != theirs
        gaps = np.abs(np.diff(r.passage_scores))
        near = np.zeros(m, bool)
        near[:-1] |= gaps <= TIE
        near[1:] |= gaps <= TIE
        near[-1] = True  # a tie at the cut: the k-th passage may be any of the tied ones
        assert close and near[moved].all(), f"query {q}: rankings differ beyond tied scores"
        tied += 1
    return identical, tied


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--queries", type=int, default=0, help="the first N questions (0 = all)")
    ap.add_argument("--k", type=int, default=100, help="passages per query")
    ap.add_argument("--threads", type=int, default=1, help="faiss / torch threads")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides of the cell (after the default "
                    f"{' '.join(CELL)})")  # fmt: skip
    args = ap.parse_args()

    import faiss
    import torch

    import densex
    from densex.pipelines.evaluate.cell import first_fetch, load_questions
    from densex.retrieval.embedding_store import open_embeddings
    from densex.retrieval.query_cache import cache_query_vectors
    from densex.retrieval.search import retrieve_passages

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    overrides = [*CELL, *args.overrides]
    t0 = time.perf_counter()
    (index,) = densex.open_index(*overrides).values()
    cell, cfg = index.cell, index.cfg
    questions, _ = load_questions(cfg)
    questions = questions[: args.queries] if args.queries else questions
    searcher = cell.searcher
    t_open = time.perf_counter() - t0
    t0 = time.perf_counter()
    texts = [q["question"] for q in questions]
    cache_query_vectors(searcher, texts, cfg.paths.cache_dir)  # the evaluate cell's cache
    xq = np.ascontiguousarray(searcher.query_vectors(texts), dtype=np.float32)
    t_encode = time.perf_counter() - t0
    vectors = np.ascontiguousarray(open_embeddings(searcher.info["embeddings_dir"]).embeddings)
    n_start = first_fetch(cell, args.k, 0)
    passage_of = cell.unit_passage_rows
    print(f"cell {' '.join(overrides)}: {len(vectors):,} units of {len(cell.passages):,} passages,"
          f" {len(xq):,} queries, top-{args.k} passages (first fetch {n_start} units),"
          f" {args.threads} thread(s); opened in {t_open:.1f} s, queries encoded in"
          f" {t_encode:.1f} s or read from the sweep's query cache (outside both clocks)")  # fmt: skip

    t0 = time.perf_counter()
    ours = retrieve_passages(
        QueryVectors(searcher.index, xq), [str(i) for i in range(len(xq))], passage_of, args.k,
        n_start=n_start,
    )  # fmt: skip
    t_ours = time.perf_counter() - t0
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(vectors.astype(np.float32))
    t0 = time.perf_counter()
    rows, scores = plain_top_passages(flat, xq, passage_of, args.k, n_start)
    t_plain = time.perf_counter() - t0
    identical, tied = same_rankings(ours, rows, scores)
    print(f"  densex retrieve_passages (ShardedIndex defaults)   {t_ours:8.2f} s")
    print(f"  faiss IndexFlatIP (defaults) + numpy max/passage   {t_plain:8.2f} s")
    print(f"  rankings: {identical:,} identical, {tied:,} differ only among scores tied within"
          f" {TIE:g}, of {len(ours):,}")  # fmt: skip
    print(f"search: densex / plain faiss = {t_plain / t_ours:.2f}x")


if __name__ == "__main__":
    main()
