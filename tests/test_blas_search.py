"""Exact search through BLAS by default (`index.blas_threshold=20`): the same neighbours and
scores as faiss's SIMD loops (`index.blas_threshold=null`), and the process-wide faiss setting
follows each index's own."""

from __future__ import annotations

import faiss
import numpy as np

from densex.retrieval.faiss_index import build_index
from densex.retrieval.sharded_index import FAISS_BLAS_THRESHOLD
from densex.retrieval.spec import IndexSpec


def test_blas_default_equals_simd_path() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((3000, 48)).astype(np.float32)
    queries = rng.standard_normal((64, 48)).astype(np.float32)
    assert IndexSpec().blas_threshold == 20
    blas = build_index(vectors, IndexSpec(num_shards=3, use_gpu=False))
    simd = build_index(vectors, IndexSpec(num_shards=3, use_gpu=False, blas_threshold=None))
    d1, i1 = blas.search(queries, 10)
    assert faiss.cvar.distance_compute_blas_threshold == 20
    d2, i2 = simd.search(queries, 10)
    assert faiss.cvar.distance_compute_blas_threshold == FAISS_BLAS_THRESHOLD  # not leaked
    np.testing.assert_allclose(d1, d2, rtol=0, atol=1e-4)
    assert (i1 == i2).mean() > 0.99  # equal up to the order of near-ties
    exact = np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :10]
    assert (np.sort(i1, 1) == np.sort(exact, 1)).all()


def test_flat_shards_built_in_place_equal_faiss_add(tmp_path) -> None:
    """Pre-sized flat shards filled in place (no growing vector) serialise to the bytes faiss's
    own `add` gives, shard by shard, across chunk and shard boundaries."""
    from densex.retrieval.faiss_index import filled_shards, shard_bounds

    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((1000, 16)).astype(np.float32)
    bounds = shard_bounds(len(vectors), 3)

    class Chunks:  # 7 uneven chunks, as an EmbeddingStore streams its shards
        def iter_arrays(self, _rows):
            cuts = [0, 10, 333, 334, 500, 800, 999, 1000]
            for a, b in zip(cuts, cuts[1:]):
                yield a, vectors[a:b]

    shards = list(filled_shards(faiss.IndexFlatIP(16), Chunks(), bounds))
    assert [s.ntotal for s in shards] == [b - a for a, b in zip(bounds, bounds[1:])]
    for shard, a, b in zip(shards, bounds, bounds[1:]):
        ref = faiss.IndexFlatIP(16)
        ref.add(vectors[a:b])
        assert faiss.serialize_index(shard).tobytes() == faiss.serialize_index(ref).tobytes()
