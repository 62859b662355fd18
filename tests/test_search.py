"""Max-over-units passage search on hand-made unit indexes (exact scores known in advance)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from densex.retrieval.search import Retrieval, max_over_units, retrieve_passages


class MatrixSearcher:
    """A unit index whose query-unit scores are a fixed matrix; query "q{i}" is row i.

    Like faiss, it returns the top-n units by score with -1 padding past the end; equal
    scores come back in a shuffled order so tests catch any dependence on it.
    """

    def __init__(self, scores: np.ndarray, seed: int = 0):
        self.scores = np.asarray(scores, dtype=np.float32)
        self.ntotal = self.scores.shape[1]
        self.unit_ids = [f"u{i}" for i in range(self.ntotal)]
        self.calls: list[tuple[int, int]] = []  # (n_queries, n)
        self.rng = np.random.default_rng(seed)

    def search(self, queries: list[str], n: int) -> tuple[np.ndarray, np.ndarray]:
        self.calls.append((len(queries), n))
        out_s = np.full((len(queries), n), -np.inf, np.float32)
        out_r = np.full((len(queries), n), -1, np.int64)
        for j, q in enumerate(queries):
            row = self.scores[int(q[1:])]
            perm = self.rng.permutation(self.ntotal)
            order = perm[np.argsort(-row[perm], kind="stable")][:n]
            out_s[j, : len(order)], out_r[j, : len(order)] = row[order], order
        return out_s, out_r


def brute_force(scores: np.ndarray, unit_passage: np.ndarray, k: int) -> list[tuple[int, float]]:
    best: dict[int, float] = {}
    for u, s in enumerate(scores.tolist()):
        p = int(unit_passage[u])
        best[p] = max(best.get(p, -np.inf), s)
    return sorted(best.items(), key=lambda ps: (-ps[1], ps[0]))[:k]


def test_passage_scores_are_max_over_units():
    # units 0,1 -> passage 0; units 2,3,4 -> passage 1; unit 5 -> passage 2
    unit_passage = np.array([0, 0, 1, 1, 1, 2])
    searcher = MatrixSearcher([[0.1, 0.9, 0.8, 0.2, 0.85, 0.3]])
    (r,) = retrieve_passages(searcher, ["q0"], unit_passage, k=3)
    assert r.passage_rows.tolist() == [0, 1, 2]
    assert r.passage_scores.tolist() == pytest.approx([0.9, 0.85, 0.3])
    # units come back best first; they are what the reader sees
    assert r.unit_rows.tolist()[:3] == [1, 4, 2]
    assert np.all(np.diff(r.unit_scores) <= 0)


def test_fetches_more_units_until_k_unique_passages():
    # q0: the 6 best units all belong to passage 0, so k=2 needs n to grow 3 -> 6 -> 8
    unit_passage = np.array([0] * 6 + [1, 2])
    q0 = [0.99, 0.98, 0.97, 0.96, 0.95, 0.94, 0.5, 0.4]
    # q1: units 6, 7, 0 come first: two passages settle above the third unit at n=3
    q1 = [0.7, 0.1, 0.1, 0.1, 0.1, 0.1, 0.9, 0.8]
    searcher = MatrixSearcher(np.array([q0, q1]))
    r0, r1 = retrieve_passages(searcher, ["q0", "q1"], unit_passage, k=2)
    assert r0.passage_rows.tolist() == [0, 1]
    assert r0.passage_scores.tolist() == pytest.approx([0.99, 0.5])
    assert len(r0.unit_rows) == 8
    assert r1.passage_rows.tolist() == [1, 2]
    assert r1.unit_rows.tolist() == [6, 7, 0]
    # only the still-pending query is searched again, with n doubled (capped at ntotal)
    assert searcher.calls == [(2, 3), (1, 6), (1, 8)]


def test_passage_index_settles_in_one_search():
    # one unit per passage: the default first fetch (k + 1) is enough
    searcher = MatrixSearcher(np.random.default_rng(0).random((4, 50)))
    results = retrieve_passages(searcher, ["q0", "q1", "q2", "q3"], np.arange(50), k=5)
    assert searcher.calls == [(4, 6)]
    for q, r in enumerate(results):
        assert r.passage_rows.tolist() == np.argsort(-searcher.scores[q])[:5].tolist()


def test_exhausted_index_returns_every_passage():
    unit_passage = np.array([0, 0, 1, 1, 1])
    searcher = MatrixSearcher([[0.1, 0.2, 0.3, 0.4, 0.5]])
    (r,) = retrieve_passages(searcher, ["q0"], unit_passage, k=10)
    assert r.passage_rows.tolist() == [1, 0]
    assert r.unit_rows.tolist() == [4, 3, 2, 1, 0]
    assert searcher.calls[-1][1] == 5  # never asks for more than ntotal


def test_ties_are_broken_by_row_whatever_the_index_order():
    unit_passage = np.array([3, 2, 1, 0, 0, 1])
    scores = np.array([[0.5, 0.5, 0.5, 0.5, 0.5, 0.5]])
    got = {
        tuple(
            retrieve_passages(MatrixSearcher(scores, seed=s), ["q0"], unit_passage, 2)[
                0
            ].passage_rows
        )
        for s in range(20)
    }
    assert got == {(0, 1)}
    (r,) = retrieve_passages(MatrixSearcher(scores, seed=3), ["q0"], unit_passage, 4)
    assert r.unit_rows.tolist()[:2] == [0, 1]


def test_rejects_mismatched_mapping_and_bad_k():
    searcher = MatrixSearcher([[0.1, 0.2]])
    with pytest.raises(ValueError, match="2 units"):
        retrieve_passages(searcher, ["q0"], [0, 0, 1], k=1)
    with pytest.raises(ValueError, match="k must be"):
        retrieve_passages(searcher, ["q0"], [0, 0], k=0)


def test_max_over_units_unordered_input():
    prow, pscore = max_over_units(
        np.array([0.2, 0.7, 0.7], np.float32), np.array([2, 0, 1]), np.array([5, 4, 5]), k=5
    )
    assert prow.tolist() == [4, 5] and pscore.tolist() == pytest.approx([0.7, 0.7])


@given(
    n_units=st.integers(1, 40),
    n_passages=st.integers(1, 12),
    k=st.integers(1, 15),
    n_start=st.one_of(st.none(), st.integers(1, 50)),
    seed=st.integers(0, 10_000),
)
def test_matches_brute_force(n_units, n_passages, k, n_start, seed):
    rng = np.random.default_rng(seed)
    unit_passage = rng.integers(0, n_passages, n_units)
    # few distinct values: plenty of ties
    scores = rng.integers(0, 5, (3, n_units)).astype(np.float32)
    results = retrieve_passages(
        MatrixSearcher(scores, seed), ["q0", "q1", "q2"], unit_passage, k, n_start=n_start
    )
    for q, r in enumerate(results):
        assert isinstance(r, Retrieval)
        expected = brute_force(scores[q], unit_passage, k)
        assert list(zip(r.passage_rows.tolist(), r.passage_scores.tolist())) == expected
        assert len(set(r.passage_rows.tolist())) == len(r)
        # every passage returned is backed by a retrieved unit with its score
        for p, s in zip(r.passage_rows, r.passage_scores):
            assert s == max(r.unit_scores[unit_passage[r.unit_rows] == p])


@given(
    n_units=st.integers(1, 60),
    n_passages=st.integers(1, 20),
    k=st.integers(1, 15),
    n=st.integers(1, 70),
    ties=st.booleans(),
    shuffled=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_settle_block_equals_the_per_query_functions(
    n_units, n_passages, k, n, ties, shuffled, seed
):
    """The block path (numpy over a block of queries; tied queries through the two functions)
    gives each query what `rank_units` + `max_over_units` give it alone, and settles the same
    queries: real-valued scores (no ties: the numpy path) and few distinct ones (ties), in the
    index's best-first order (sorting skipped) or any other (a union of indexes: sorted)."""
    from densex.retrieval.search import is_descending, rank_units, settle_block

    rng = np.random.default_rng(seed)
    unit_passage = rng.integers(0, n_passages, n_units)
    raw = rng.integers(0, 4, (5, n_units)) if ties else rng.random((5, n_units))
    searcher = MatrixSearcher(raw.astype(np.float32), seed)
    scores, rows = searcher.search([f"q{i}" for i in range(5)], n)
    assert is_descending(scores)
    if shuffled:
        perm = np.stack([rng.permutation(n) for _ in range(5)])
        scores, rows = np.take_along_axis(scores, perm, 1), np.take_along_axis(rows, perm, 1)
    before = scores.copy(), rows.copy()
    got = settle_block(scores, rows, unit_passage, k, n, n_units)
    assert np.array_equal(scores, before[0]) and np.array_equal(rows, before[1])  # untouched
    for j, r in enumerate(got):
        us, ur = rank_units(scores[j], rows[j])
        prow, pscore = max_over_units(us, ur, unit_passage, k)
        settled = len(prow) >= k and pscore[k - 1] > us[-1]
        assert (r is not None) == (settled or n >= n_units or len(ur) < n)
        if r is not None:
            assert r.passage_rows.tolist() == prow.tolist()
            assert r.passage_scores.tolist() == pscore.tolist()
            assert r.unit_rows.tolist() == ur.tolist() and r.unit_scores.tolist() == us.tolist()
            assert r.passage_rows.dtype == np.int64 and r.unit_scores.dtype == np.float32
