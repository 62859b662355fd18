"""Reciprocal rank fusion and the union searcher behind granularity=mixed."""

from __future__ import annotations

import numpy as np
import pytest

from densex.analysis.fusion import UnionSearcher, fuse_retrievals, rrf_fuse, rrf_scores
from densex.retrieval.search import Retrieval, retrieve_passages


def test_rrf_hand_made_ranking():
    rankings = [[1, 2, 3], [3, 1, 4]]
    s = rrf_scores(rankings, k=60)
    assert s == pytest.approx({1: 1 / 61 + 1 / 62, 2: 1 / 62, 3: 1 / 63 + 1 / 61, 4: 1 / 63})
    items, scores = rrf_fuse(rankings, k=60)
    assert items.tolist() == [1, 3, 2, 4]
    # k = 0: 1 -> 1 + 1/2, 3 -> 1/3 + 1, 2 -> 1/2, 4 -> 1/3; a tie (2 vs none) is by item
    items, _ = rrf_fuse([[1, 2, 3], [3, 1, 4]], k=0, top=3)
    assert items.tolist() == [1, 3, 2]
    items, _ = rrf_fuse([[5, 6], [6, 5]], k=60)
    assert items.tolist() == [5, 6]  # equal scores: smaller item first


def _r(prows, urows):
    return Retrieval(
        np.array(prows, np.int64),
        np.zeros(len(prows), np.float32),
        np.array(urows, np.int64),
        np.zeros(len(urows), np.float32),
    )


def test_fuse_retrievals_offsets_units_and_cuts_passages():
    a = [_r([0, 1, 2], [0, 1])]
    b = [_r([2, 0, 3], [0, 5])]
    (f,) = fuse_retrievals([a, b], k=60, top=2, unit_offsets=[0, 10])
    assert f.passage_rows.tolist() == [0, 2]
    assert f.unit_rows.tolist() == [0, 10, 1, 15]
    assert f.passage_scores[0] == pytest.approx(1 / 61 + 1 / 62)


class ExactSearcher:
    """Brute-force inner product over given vectors; queries are row indexes of `queries`."""

    def __init__(self, vectors: np.ndarray, queries: np.ndarray):
        self.vectors, self.queries = vectors, queries
        self.unit_ids = [f"u{i}" for i in range(len(vectors))]

    @property
    def ntotal(self) -> int:
        return len(self.vectors)

    def search(self, queries, n):
        q = self.queries[[int(x) for x in queries]]
        scores = (q @ self.vectors.T).astype(np.float32)
        rows = np.broadcast_to(np.arange(self.ntotal), scores.shape)
        order = np.lexsort((rows, -scores), axis=1)[:, :n]
        sc = np.take_along_axis(scores, order, 1)
        rw = order.astype(np.int64)
        if n > self.ntotal:
            sc = np.pad(sc, ((0, 0), (0, n - self.ntotal)), constant_values=-np.inf)
            rw = np.pad(rw, ((0, 0), (0, n - self.ntotal)), constant_values=-1)
        return sc, rw


def test_union_searcher_is_one_index_over_all_units():
    rng = np.random.default_rng(0)
    parts = [rng.normal(size=(m, 8)).astype(np.float32) for m in (7, 19, 31)]
    queries = rng.normal(size=(5, 8)).astype(np.float32)
    union = UnionSearcher([ExactSearcher(p, queries) for p in parts])
    whole = ExactSearcher(np.concatenate(parts), queries)
    assert union.ntotal == 57 and len(union.unit_ids) == 57
    for n in (1, 10, 57, 70):
        us, ur = union.search(["0", "1", "2", "3", "4"], n)
        ws, wr = whole.search(["0", "1", "2", "3", "4"], n)
        assert (ur == wr).all()
        np.testing.assert_allclose(us, ws, rtol=1e-6, atol=1e-6)
    # passage search over the union = over the concatenated units (max over all units)
    unit_passages = rng.integers(0, 12, size=57)
    got = retrieve_passages(union, ["0", "1", "2"], unit_passages, 5)
    want = retrieve_passages(whole, ["0", "1", "2"], unit_passages, 5)
    for g, w in zip(got, want):
        assert g.passage_rows.tolist() == w.passage_rows.tolist()
