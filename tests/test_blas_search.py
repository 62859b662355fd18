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


def test_index_build_holds_one_shard_at_a_time(tmp_path) -> None:
    """build_index_to_dir over memory-mapped vectors: the anonymous memory the build adds stays
    near one shard (it was two: `enumerate` kept the written shard while the next was made)."""
    import re
    import threading

    from densex.retrieval.faiss_index import build_index_to_dir

    def anon_mb() -> float:
        with open("/proc/self/status") as f:
            text = f.read()
        return int(re.search(r"RssAnon:\s+(\d+)", text).group(1)) / 1024

    n, d = 400_000, 64  # 102 MB of vectors, four shards of 25.6 MB under a 25.6 MB budget
    vectors = np.memmap(tmp_path / "v.f32", dtype=np.float32, mode="w+", shape=(n, d))
    vectors[:] = 1.0
    vectors.flush()
    vectors = np.memmap(tmp_path / "v.f32", dtype=np.float32, mode="r", shape=(n, d))
    shard_mb = n // 4 * d * 4 / 2**20
    peak, done = [0.0], threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            peak[0] = max(peak[0], anon_mb())

    base = anon_mb()
    sampler = threading.Thread(target=sample)
    sampler.start()
    spec = IndexSpec(use_gpu=False, memory_budget_gb=shard_mb / 1024)
    index = build_index_to_dir(vectors, spec, tmp_path / "index")
    done.set()
    sampler.join()
    assert len(index.paths) == 4
    # one shard + one 65,536-row block (16 MB) + slack; two shards would be 51 MB over
    assert peak[0] - base < shard_mb + 16 + 8, (peak[0] - base, shard_mb)
