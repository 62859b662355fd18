"""Fusing rankings: reciprocal rank fusion, and one searcher over several unit indexes.

- `rrf_scores(rankings, k=60)`: reciprocal rank fusion (Cormack, Clarke & Buettcher 2009):
  an item's score is the sum over the rankings that contain it of `1 / (k + rank)` (rank
  from 1); `rrf_fuse` ranks items by it (ties: smaller item first).
- `fuse_retrievals(per_member, k, top)`: per question, RRF over the members' passage rankings
  (the top `top` kept) and over their ranked units (every unit kept: QA reads them), as a
  `Retrieval` whose scores are the fused scores.
- `UnionSearcher(searchers)`: the exact top-n over the union of several unit indexes whose
  scores are comparable (the same dense retriever over passage, sentence and proposition
  units): each is searched for n and the lists merged, so it behaves as one index over all
  units (rows = concatenation in the given order) and reuses each granularity's cached
  embeddings; `granularity=mixed` then scores a passage by the max over all its units.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from densex.retrieval.search import Retrieval

RRF_K = 60


def rrf_scores(rankings: Sequence[np.ndarray | Sequence[int]], k: int = RRF_K) -> dict[int, float]:
    """`{item: sum_r 1 / (k + rank_r(item))}` over the rankings holding it (ranks from 1)."""
    if k < 0:
        raise ValueError(f"RRF k must be >= 0, got {k}")
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(np.asarray(ranking, dtype=np.int64).tolist(), start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return scores


def rrf_fuse(
    rankings: Sequence[np.ndarray | Sequence[int]], k: int = RRF_K, top: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Items ranked by RRF score (desc, ties by item asc), at most `top`: `(items, scores)`."""
    scores = rrf_scores(rankings, k)
    if not scores:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    items = np.fromiter(scores.keys(), np.int64, len(scores))
    values = np.fromiter(scores.values(), np.float64, len(scores))
    order = np.lexsort((items, -values))[:top]
    return items[order], values[order]


def fuse_retrievals(
    per_member: Sequence[Sequence[Retrieval]],
    k: int = RRF_K,
    top: int = 100,
    unit_offsets: Sequence[int] | None = None,
) -> list[Retrieval]:
    """RRF of several members' retrievals of the same questions (aligned lists).

    Passages (rows of one shared passage table) are fused and cut to `top`; units are fused
    too, after adding `unit_offsets[m]` to member m's unit rows (members over different unit
    files share one row space; members over the same units file share rows and so add up).
    """
    if not per_member:
        raise ValueError("no members to fuse")
    n = {len(r) for r in per_member}
    if len(n) != 1:
        raise ValueError(f"members retrieved different numbers of questions: {sorted(n)}")
    offsets = list(unit_offsets) if unit_offsets is not None else [0] * len(per_member)
    out = []
    for qi in range(len(per_member[0])):
        rs = [m[qi] for m in per_member]
        prow, pscore = rrf_fuse([r.passage_rows for r in rs], k, top)
        urow, uscore = rrf_fuse([r.unit_rows + off for r, off in zip(rs, offsets)], k)
        out.append(Retrieval(prow, pscore.astype(np.float32), urow, uscore.astype(np.float32)))
    return out


class UnionSearcher:
    """Exact top-n over the union of unit indexes with comparable scores (see module doc)."""

    def __init__(self, searchers: Sequence[object]) -> None:
        if not searchers:
            raise ValueError("no searchers")
        self.searchers = list(searchers)
        self.offsets = np.cumsum([0] + [int(s.ntotal) for s in self.searchers])[:-1]
        self.unit_ids = [u for s in self.searchers for u in s.unit_ids]
        self.info = {"members": [getattr(s, "info", {}) for s in self.searchers]}

    @property
    def ntotal(self) -> int:
        return int(sum(int(s.ntotal) for s in self.searchers))

    def search(self, queries: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores float32 [nq, n], rows int64 [nq, n]); rows index the concatenated units,
        -1 where fewer than n units exist; order: score desc, row asc."""
        nq = len(queries)
        scores, rows = [], []
        for s, off in zip(self.searchers, self.offsets):
            sc, rw = s.search(list(queries), min(n, int(s.ntotal)))
            sc, rw = np.asarray(sc, np.float32), np.asarray(rw, np.int64)
            scores.append(np.where(rw >= 0, sc, -np.inf).astype(np.float32))
            rows.append(np.where(rw >= 0, rw + off, -1))
        sc = np.concatenate(scores, axis=1) if scores else np.empty((nq, 0), np.float32)
        rw = np.concatenate(rows, axis=1) if rows else np.empty((nq, 0), np.int64)
        # rows of -1 sort last: key (valid desc, score desc, row asc)
        big = np.where(rw >= 0, rw, np.iinfo(np.int64).max)
        order = np.lexsort((big, -sc, rw < 0), axis=1)[:, :n]
        sc = np.take_along_axis(sc, order, axis=1)
        rw = np.take_along_axis(rw, order, axis=1)
        if rw.shape[1] < n:
            pad = n - rw.shape[1]
            sc = np.pad(sc, ((0, 0), (0, pad)), constant_values=-np.inf)
            rw = np.pad(rw, ((0, 0), (0, pad)), constant_values=-1)
        return sc.astype(np.float32), rw
