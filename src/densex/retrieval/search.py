"""Passage retrieval over any unit index: a passage scores the max over its units.

The paper (Section 4) retrieves units -- passages, sentences or propositions -- and evaluates
*passage* recall@k: each unit maps back to the passage it came from, a passage is as good as
its best unit, and units are fetched until k distinct passages are found. With a top-n unit
list sorted by score, any passage not yet seen scores at most the n-th unit's score s_n, so
once k distinct passages score strictly above s_n they are the exact top-k by max-over-units;
otherwise we double n and search again (only for the queries that still need it) until the
index is exhausted.

Ties are broken by row id (smaller first) for units and passages. The strict check above makes
that hold across the fetch boundary too: a passage tied with s_n may own an unfetched unit of
equal score, so it is never trusted. Results thus do not depend on the order in which an index
returns equal scores.

`rank_units` and `max_over_units` define the step for one query; `retrieve_passages` runs it a
block of queries at a time in numpy (`settle_block`: nothing per unit in Python, ~10x faster on
a CPU), the same rows, scores and ties as the two functions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from densex.utils.logging import get_logger
from densex.utils.progress import Progress

log = get_logger(__name__)

# queries encoded and searched per call: progress shows between chunks, memory stays bounded
QUERY_CHUNK = 512
# fetched units ranked and turned into passages together (`settle_block`): queries x n
SETTLE_CELLS = 1 << 19


@runtime_checkable
class UnitSearcher(Protocol):
    """A unit index (dense, BM25, a union or fusion of them): `search(queries, n)` gives the
    top-n unit rows per query as (scores float32 [nq, n], rows int64 [nq, n]; -1 = no more
    units) and `ntotal` the number of units. What `retrieve_passages` needs."""

    @property
    def ntotal(self) -> int: ...

    def search(self, queries: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray]: ...


@dataclass
class Retrieval:
    """One query's result: ranked passages and the ranked units they were scored from.

    `passage_rows`/`passage_scores` have at most k entries (fewer only if the index has fewer
    passages); `unit_rows`/`unit_scores` are every unit fetched, best first (they feed QA).
    """

    passage_rows: np.ndarray  # int64[<=k]
    passage_scores: np.ndarray  # float32[<=k]
    unit_rows: np.ndarray  # int64[n]
    unit_scores: np.ndarray  # float32[n]

    def __len__(self) -> int:
        return len(self.passage_rows)


def rank_units(scores: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop empty slots (row -1) and sort by (score desc, row asc): a deterministic order."""
    keep = rows >= 0
    scores, rows = scores[keep].astype(np.float32), rows[keep].astype(np.int64)
    order = np.lexsort((rows, -scores))
    return scores[order], rows[order]


def max_over_units(
    unit_scores: np.ndarray, unit_rows: np.ndarray, unit_passage_rows: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k passages by the max score of their units among those given (any order).

    Returns `(passage_rows, passage_scores)`, best first, ties broken by passage row.
    """
    passages = unit_passage_rows[unit_rows]
    best: dict[int, float] = {}
    for p, s in zip(passages.tolist(), unit_scores.tolist()):
        if p not in best or s > best[p]:
            best[p] = s
    if not best:
        return np.empty(0, np.int64), np.empty(0, np.float32)
    prow = np.fromiter(best.keys(), dtype=np.int64, count=len(best))
    pscore = np.fromiter(best.values(), dtype=np.float32, count=len(best))
    order = np.lexsort((prow, -pscore))[:k]
    return prow[order], pscore[order]


def is_descending(d: np.ndarray) -> bool:
    """Whether every row of `d` is sorted best first (faiss's own order): then a stable sort
    by score would leave it unchanged."""
    return bool((d[:, 1:] <= d[:, :-1]).all())


def first_units(ranked_rows: np.ndarray, unit_passage_rows: np.ndarray) -> np.ndarray:
    """Per query of a block (unit rows best first, -1 = empty slot), whether each unit is its
    passage's first, i.e. best, in that order: one sort of (passage, rank) keys per block."""
    n = ranked_rows.shape[1]
    valid = ranked_rows >= 0
    prow = np.where(valid, unit_passage_rows[np.where(valid, ranked_rows, 0)], -1)
    key = np.sort(prow * n + np.arange(n), axis=1)  # by passage, then rank
    same = np.zeros(key.shape, dtype=bool)
    same[:, 1:] = key[:, 1:] // n == key[:, :-1] // n
    first = np.zeros(key.shape, dtype=bool)
    np.put_along_axis(first, key % n, ~same, axis=1)
    return first & valid


def rank_tied(us: np.ndarray, ur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`rank_units` for a block of queries at once (scores best first within each row, empty
    slots -inf / -1 last): each row in (score desc, row asc) order, empty slots still last."""
    order = np.lexsort((ur, -us), axis=-1)
    return np.take_along_axis(us, order, 1), np.take_along_axis(ur, order, 1)


def passage_order(
    us: np.ndarray, ur: np.ndarray, first: np.ndarray, unit_passage_rows: np.ndarray
) -> np.ndarray:
    """Per row of ranked units, the positions of its passages' first units in `max_over_units`'
    order (score desc, passage row asc), the other positions after them."""
    prow = unit_passage_rows[np.maximum(ur, 0)]
    big = np.iinfo(np.int64).max
    return np.lexsort((np.where(first, prow, big), np.where(first, -us, np.inf)), axis=-1)


def settle_block(
    scores: np.ndarray, rows: np.ndarray, unit_passage_rows: np.ndarray, k: int, n: int,
    ntotal: int,
) -> list[Retrieval | None]:  # fmt: skip
    """`rank_units` then `max_over_units` for a block of queries' top-`n` units, ranked and
    grouped by passage in numpy (`first_units`; the queries whose units tie in score ranked by
    (score, row) and their passages by (score, passage row) with `lexsort`, as the two
    functions do): per query its `Retrieval`, or None when its top-k passages are not settled
    yet (fewer than k, or the k-th not strictly above the last unit fetched) and the index may
    hold more (n < `ntotal` and n units came back). The same rows, scores and ties as the two
    functions one query at a time; a `Retrieval`'s arrays are views of the block's."""
    rows = np.asarray(rows, dtype=np.int64)
    scores = np.where(rows >= 0, np.asarray(scores, dtype=np.float32), np.float32(-np.inf))
    if is_descending(scores):  # faiss's order: the stable sort below would keep it
        us, ur = scores, rows
    else:
        order = np.argsort(-scores, axis=1, kind="stable")  # empty slots (-inf) last
        us, ur = np.take_along_axis(scores, order, 1), np.take_along_axis(rows, order, 1)
    nq = len(us)
    count = (ur >= 0).sum(axis=1)
    # without ties the score order is the (score, row) order and passages' scores are distinct
    tied = np.flatnonzero(((us[:, 1:] == us[:, :-1]) & (ur[:, 1:] >= 0)).any(axis=1))
    if len(tied):
        ur = ur.copy() if ur is rows else ur  # never the caller's array
        us[tied], ur[tied] = rank_tied(us[tied], ur[tied])
    first = first_units(ur, unit_passage_rows)
    # the positions of each query's first k passages, best first
    slot = np.cumsum(first, axis=1) - 1
    r, c = np.nonzero(first & (slot < k))
    best = np.zeros((nq, k), dtype=np.int64)
    best[r, slot[r, c]] = c
    if len(tied):
        m = min(k, us.shape[1])
        best[tied, :m] = passage_order(us[tied], ur[tied], first[tied], unit_passage_rows)[:, :m]
    found = np.minimum(first.sum(axis=1), k)
    top_s = np.take_along_axis(us, best, 1)
    top_p = unit_passage_rows[np.take_along_axis(ur, best, 1)]
    last = us[np.arange(nq), np.maximum(count - 1, 0)]
    done = (found >= k) & (top_s[:, k - 1] > last) | (n >= ntotal) | (count < n)
    return [
        Retrieval(top_p[j, : found[j]], top_s[j, : found[j]], ur[j, : count[j]], us[j, : count[j]])
        if done[j]
        else None
        for j in range(nq)
    ]


def iter_search(
    searcher: UnitSearcher, queries: Sequence[str], n: int, chunk: int = QUERY_CHUNK
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """`searcher.search(queries, n)` in chunks of `chunk` queries: (the chunk's first position,
    its scores, its rows) per chunk, under a progress bar (or periodic log lines) with
    queries/s when there is more than one chunk."""
    queries = list(queries)
    if len(queries) <= chunk:
        yield 0, *searcher.search(queries, n)
        return
    with Progress(f"encode + search top-{n} units", total=len(queries), unit="queries") as p:
        for start in range(0, len(queries), chunk):
            s, r = searcher.search(queries[start : start + chunk], n)
            yield start, np.asarray(s), np.asarray(r)
            p.advance(len(s))


def search_chunked(
    searcher: UnitSearcher, queries: Sequence[str], n: int, chunk: int = QUERY_CHUNK
) -> tuple[np.ndarray, np.ndarray]:
    """`iter_search`'s chunks in one pair of arrays: the same as one `searcher.search` call."""
    parts = list(iter_search(searcher, queries, n, chunk))
    if len(parts) == 1:
        return parts[0][1], parts[0][2]
    return np.concatenate([s for _, s, _ in parts]), np.concatenate([r for _, _, r in parts])


def retrieve_passages(
    searcher: UnitSearcher,
    queries: Sequence[str],
    unit_passage_rows: np.ndarray | Sequence[int],
    k: int,
    n_start: int | None = None,
) -> list[Retrieval]:
    """Top-k passages per query, scored by max over their retrieved units.

    `unit_passage_rows[u]` is the passage row of unit row `u`. The first search fetches
    `n_start` units (default k + 1: enough for a passage index, whose k-th passage must score
    above the last unit fetched); n doubles for the queries without k settled passages until
    each has them or the whole index has been read. Pass a larger `n_start` (k times units per
    passage) for fine-grained units to save searches. Each chunk of queries is settled as its
    search returns.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    unit_passage_rows = np.asarray(unit_passage_rows, dtype=np.int64)
    ntotal = int(searcher.ntotal)
    if ntotal != len(unit_passage_rows):
        raise ValueError(
            f"index has {ntotal} units but unit_passage_rows maps {len(unit_passage_rows)}"
        )
    queries = list(queries)
    results: list[Retrieval | None] = [None] * len(queries)
    pending = list(range(len(queries)))
    n = max(1, min(n_start or k + 1, ntotal)) if ntotal else 0
    while pending and n > 0:
        still = []
        block = max(1, SETTLE_CELLS // n)  # bounded [block, n] temporaries
        for at, scores, rows in iter_search(searcher, [queries[i] for i in pending], n):
            for start in range(0, len(scores), block):
                part = slice(start, start + block)
                found = settle_block(scores[part], rows[part], unit_passage_rows, k, n, ntotal)
                for qi, r in zip(pending[at + start : at + start + len(found)], found):
                    if r is None:
                        still.append(qi)
                    else:
                        results[qi] = r
        pending = still
        n = min(2 * n, ntotal)
    empty = Retrieval(
        np.empty(0, np.int64),
        np.empty(0, np.float32),
        np.empty(0, np.int64),
        np.empty(0, np.float32),
    )
    return [r if r is not None else empty for r in results]


def fetch_units_for_words(
    searcher: Any,
    queries: list[str],
    results: list[Any],
    unit_words: np.ndarray,
    need_words: int,
) -> int:
    """Extend each result's ranked units until they hold `need_words` words (or the index is
    exhausted), in place; return how many questions needed a further search.

    `retrieve_passages` stops fetching units once the top-k passages are settled, which with
    coarse units and a small k can be fewer words than the answer-recall curve and the reader's
    budget read: their values at l words would then be understated. The extra units come from
    the same ranking (score desc, row asc); the passages found are unchanged.
    """
    ntotal = int(searcher.ntotal)
    avg = max(1.0, float(unit_words.mean())) if len(unit_words) else 1.0

    def short(r: Any) -> bool:
        return int(unit_words[r.unit_rows].sum()) < need_words and len(r.unit_rows) < ntotal

    pending = [i for i, r in enumerate(results) if short(r)]
    extended = len(pending)
    while pending:
        have = max(len(results[i].unit_rows) for i in pending)
        n = min(ntotal, max(2 * have, have + int(np.ceil(need_words / avg)) + 1))
        scores, rows = search_chunked(searcher, [queries[i] for i in pending], n)
        still = []
        for j, qi in enumerate(pending):
            us, ur = rank_units(np.asarray(scores[j]), np.asarray(rows[j]))
            r = results[qi]
            grew = len(ur) > len(r.unit_rows)
            if grew:
                r.unit_rows, r.unit_scores = ur, us
            if grew and n < ntotal and short(r):
                still.append(qi)
        pending = still
    if extended:
        log.info("fetched more units for %d questions to cover %d words", extended, need_words)
    return extended
