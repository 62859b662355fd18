"""faiss indexes over unit embeddings: exact IndexFlatIP by default, optionally sharded/approximate.

The paper searches an exact inner-product index split into shards (8 for 250M propositions);
a `ShardedIndex` holds contiguous row ranges, searches each, and merges the top-n. Approximate
indexes (IVF, HNSW, IVF-PQ) are built from faiss factory strings; their recall against exact
search is measured on a sample of stored vectors and kept in the manifest, so a faster index
never silently costs accuracy.

This module builds them (`build_index`, `build_index_to_dir`: one streamed pass, each shard
written when full) and measures recall; the settings are `retrieval.spec.IndexSpec`, the searched
and saved index `retrieval.sharded_index`, GPU placement `retrieval.faiss_gpu`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from faiss.contrib.exhaustive_search import knn_ground_truth

from densex.retrieval.faiss_gpu import set_search_params
from densex.retrieval.sharded_index import ShardedIndex, shard_file_name, write_shard_index
from densex.retrieval.spec import IndexSpec
from densex.utils.logging import get_logger

log = get_logger(__name__)

__all__ = [
    "build_index",
    "build_index_to_dir",
    "exact_knn",
    "filled_shards",
    "iter_arrays",
    "measure_recall",
    "shard_bounds",
    "shards_for_budget",
]


def iter_arrays(vectors: Any, chunk_rows: int = 65536) -> Iterator[tuple[int, np.ndarray]]:
    """(start_row, float32 block) from an array or anything with `iter_arrays()` (EmbeddingStore)."""
    if hasattr(vectors, "iter_arrays"):
        for start, arr in vectors.iter_arrays(chunk_rows):
            yield start, np.ascontiguousarray(arr, dtype=np.float32)
        return
    arr = np.asarray(vectors)
    for s in range(0, len(arr), chunk_rows):
        yield s, np.ascontiguousarray(arr[s : s + chunk_rows], dtype=np.float32)


def _nlist(n: int) -> int:
    """4*sqrt(n) inverted lists, but >= 39 training points each (faiss warns below that)."""
    return max(1, min(int(4 * math.sqrt(max(n, 1))), n // 39))


def shard_bounds(ntotal: int, num_shards: int) -> list[int]:
    """Contiguous, near-equal row ranges: bounds[i]..bounds[i+1] is shard i."""
    num_shards = max(1, min(num_shards, max(ntotal, 1)))
    return [int(b) for b in np.linspace(0, ntotal, num_shards + 1).round().astype(np.int64)]


def _train_sample(vectors: Any, ntotal: int, size: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    take = np.sort(rng.choice(ntotal, size=min(size, ntotal), replace=False))
    out, pos = [], 0
    for start, arr in iter_arrays(vectors):
        while pos < len(take) and take[pos] < start + len(arr):
            lo = pos
            while pos < len(take) and take[pos] < start + len(arr):
                pos += 1
            out.append(arr[take[lo:pos] - start])
    return np.concatenate(out)


def build_index(vectors: Any, spec: IndexSpec | None = None) -> ShardedIndex:
    """Build (and train, for IVF/PQ) an inner-product index over `vectors`, split into shards.

    `vectors` is a float array [n, d] or an `EmbeddingStore` (streamed, never concatenated).
    Approximate indexes get their recall vs exact search measured (`spec.recall_queries`).
    """
    spec = spec if spec is not None else IndexSpec()
    t0 = time.perf_counter()
    ntotal = int(len(vectors))
    dim = int(vectors.dim if hasattr(vectors, "dim") else np.asarray(vectors).shape[1])
    template, factory = _trained_template(vectors, ntotal, dim, spec)
    bounds = shard_bounds(ntotal, spec.num_shards)
    shards = list(filled_shards(template, vectors, bounds))
    for shard in shards:
        set_search_params(shard, spec.params)
    index = ShardedIndex(shards, bounds[:-1], spec)
    index.info = {"factory": factory}
    _measure(index, vectors, spec, factory)
    index.info["build_seconds"] = round(time.perf_counter() - t0, 3)
    return index.to_gpu()


def filled_shards(template: faiss.Index, vectors: Any, bounds: list[int]) -> Iterator[faiss.Index]:
    """Shard after shard (rows bounds[i]..bounds[i+1], each a clone of `template`), filled in
    one streamed pass over `vectors` and yielded as soon as it is full; an empty corpus gives
    one empty shard. A flat (exact) shard is sized once and filled in place: its memory is the
    shard's bytes, never the 2-3x of a growing vector's reallocations."""
    flat = isinstance(faiss.downcast_index(template), faiss.IndexFlat)
    s = 0
    shard, view = _new_shard(template, bounds[1] - bounds[0], flat)
    for start, arr in iter_arrays(vectors):  # shards are contiguous row ranges
        pos = 0
        while pos < len(arr):
            take = min(len(arr) - pos, bounds[s + 1] - (start + pos))
            if view is not None:
                at = start + pos - bounds[s]
                view[at : at + take] = arr[pos : pos + take]
            else:
                shard.add(arr[pos : pos + take])
            pos += take
            if start + pos == bounds[s + 1]:
                yield shard
                s += 1
                del shard, view  # released before the next shard is allocated
                n_next = bounds[s + 1] - bounds[s] if s < len(bounds) - 1 else 0
                shard, view = _new_shard(template, n_next, flat)
    if s < len(bounds) - 1:
        yield shard


def _new_shard(template: faiss.Index, n: int, flat: bool) -> tuple[faiss.Index, np.ndarray | None]:
    """An empty clone of `template`; a flat one pre-sized to `n` rows (ntotal = n) with a
    writable float32 view [n, d] of its codes, else no view (filled by `add`)."""
    shard = faiss.clone_index(template)
    if not flat or n == 0:
        return shard, None
    shard.codes.resize(n * shard.code_size)
    view = faiss.rev_swig_ptr(shard.codes.data(), n * shard.code_size)
    shard.ntotal = n
    return shard, view.view(np.float32).reshape(n, shard.d)


def shards_for_budget(ntotal: int, bytes_per_vector: int, spec: IndexSpec) -> int:
    """`spec.num_shards`, raised so that no shard exceeds `spec.memory_budget_gb`."""
    budget = max(1, int(spec.memory_budget_gb * (1 << 30)))
    return max(int(spec.num_shards), -(-ntotal * bytes_per_vector // budget))


def build_index_to_dir(
    vectors: Any, spec: IndexSpec | None, out_dir: str | Path, **manifest: Any
) -> ShardedIndex:
    """`build_index`, holding one shard at a time: each shard is built from streamed vectors,
    written to `out_dir` and released, then the manifest is written and the index loaded (held
    in RAM, or memory-mapped shard by shard when over `spec.memory_budget_gb`). Peak memory:
    one shard plus the training sample, whatever the corpus size."""
    spec = spec if spec is not None else IndexSpec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    ntotal = int(len(vectors))
    dim = int(vectors.dim if hasattr(vectors, "dim") else np.asarray(vectors).shape[1])
    template, factory = _trained_template(vectors, ntotal, dim, spec)
    per_vector = max(1, int(getattr(template, "code_size", dim * 4)))
    bounds = shard_bounds(ntotal, shards_for_budget(ntotal, per_vector, spec))
    n_shards = len(bounds) - 1
    # no `enumerate`: its reused result tuple would keep the written shard alive while the
    # generator allocates the next one (two shards in memory instead of one)
    shards = filled_shards(template, vectors, bounds)  # yields exactly n_shards
    for s in range(n_shards):
        shard = next(shards)
        write_shard_index(shard, out / shard_file_name(s, n_shards))
        del shard  # released before the next shard is allocated
    paths = [out / shard_file_name(s, n_shards) for s in range(n_shards)]
    ntotals = [bounds[s + 1] - bounds[s] for s in range(n_shards)]
    index = ShardedIndex([None] * n_shards, bounds[:-1], spec, paths, ntotals, dim)
    index.info = {"factory": factory}
    _measure(index, vectors, spec, factory)
    index.info["build_seconds"] = round(time.perf_counter() - t0, 3)
    index.save(out, **manifest)
    return ShardedIndex.load(out, spec)


def _trained_template(
    vectors: Any, ntotal: int, dim: int, spec: IndexSpec
) -> tuple[faiss.Index, str]:
    """The empty (trained, for IVF/PQ) index every shard is cloned from, and its factory."""
    factory = spec.factory.replace("{nlist}", str(_nlist(ntotal)))
    template = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    if not template.is_trained:
        sample = _train_sample(vectors, ntotal, spec.train_size or ntotal, spec.seed)
        log.info("training %s on %d vectors", factory, len(sample))
        template.train(sample)
    return template, factory


def _measure(index: ShardedIndex, vectors: Any, spec: IndexSpec, factory: str) -> None:
    """An approximate index's recall vs exact search, into `index.info["recall"]`."""
    if spec.exact or spec.recall_queries <= 0 or index.ntotal == 0:
        return
    index.info["recall"] = {
        **measure_recall(index, vectors, spec.recall_queries, spec.recall_k),
        "params": dict(spec.params),
    }
    log.info(
        "index %s: recall@%d vs exact = %.4f on %d sampled vectors",
        factory,
        spec.recall_k,
        index.info["recall"]["recall"],
        index.info["recall"]["queries"],
    )


def exact_knn(vectors: Any, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k (k <= number of vectors) over streamed blocks, with faiss's
    `knn_ground_truth` (no second full index in memory)."""
    q = np.ascontiguousarray(queries, dtype=np.float32)
    blocks = (arr for _, arr in iter_arrays(vectors))
    return knn_ground_truth(q, blocks, k, metric_type=faiss.METRIC_INNER_PRODUCT, ngpu=0)


def measure_recall(
    index: ShardedIndex, vectors: Any, num_queries: int, k: int = 10, seed: int = 0
) -> dict[str, Any]:
    """recall@k of `index` against exact search, queries = a sample of the stored vectors."""
    ntotal = int(len(vectors))
    queries = _train_sample(vectors, ntotal, num_queries, seed + 1)
    k = min(k, ntotal)
    _, exact = exact_knn(vectors, queries, k)
    _, approx = index.search(queries, k)
    hits = sum(len(set(a[a >= 0]) & set(e)) for a, e in zip(approx, exact))
    return {"recall": hits / (len(queries) * k), "k": k, "queries": len(queries)}
