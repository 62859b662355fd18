"""faiss indexes over unit embeddings: exact IndexFlatIP by default, optionally sharded/approximate.

The paper searches an exact inner-product index split into shards (8 for 250M propositions);
a `ShardedIndex` holds contiguous row ranges, searches each, and merges the top-n. Approximate
indexes (IVF, HNSW, IVF-PQ) are built from faiss factory strings; their recall against exact
search is measured on a sample of stored vectors and kept in the manifest, so a faster index
never silently costs accuracy.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from densex.retrieval.spec import IndexSpec
from densex.utils.integrity import DamagedArtifact, file_record, verify_files
from densex.utils.io import DataError, atomic_open, read_json, write_manifest
from densex.utils.logging import get_logger

log = get_logger(__name__)

# faiss GPU indexes assert k <= GPU_MAX_SELECTION_K (2048); larger searches go to a CPU copy.
GPU_MAX_K = 2048
# memory-mapped reads: flat codes (IFC) and inverted lists (IVF) stay on disk until touched
MMAP_FLAGS = faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY


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


def _set_params(index: faiss.Index, params: Mapping[str, Any]) -> None:
    if not params:
        return
    ps = faiss.GpuParameterSpace() if _is_gpu(index) else faiss.ParameterSpace()
    for key, value in params.items():
        ps.set_index_parameter(index, key, value)


def _is_gpu(index: faiss.Index) -> bool:
    return "Gpu" in type(index).__name__


def _to_cpu(index: faiss.Index) -> faiss.Index:
    return faiss.index_gpu_to_cpu(index)


def gpu_available() -> bool:
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def _want_gpu(use_gpu: Any) -> bool:
    if isinstance(use_gpu, str) and use_gpu.lower() == "auto":
        return gpu_available()
    if use_gpu in (True, "true", "True"):
        if not gpu_available():
            raise RuntimeError("index.use_gpu=true but this faiss build sees no GPU")
        return True
    return False


class ShardedIndex:
    """Row-range shards of one logical inner-product index; `search` merges their top-n.

    A shard is either resident (a faiss index in RAM or on a GPU) or, for an index opened with
    `lazy=True`, a file read memory-mapped when searched and released right after, so searching
    holds one shard's pages at a time, whatever the corpus size.
    """

    def __init__(
        self,
        shards: list[faiss.Index | None],
        offsets: list[int],
        spec: IndexSpec,
        paths: list[Path] | None = None,
        ntotals: list[int] | None = None,
        dim: int | None = None,
    ) -> None:
        if len(shards) != len(offsets):
            raise ValueError("one offset per shard")
        self.shards, self.offsets, self.spec = shards, offsets, spec
        self.paths = paths or [None] * len(shards)
        self.ntotals = ntotals or [int(s.ntotal) for s in shards]
        self._dim = dim if dim is not None else int(shards[0].d)
        self.info: dict[str, Any] = {}
        self._cpu_copies: dict[int, faiss.Index] = {}

    @property
    def ntotal(self) -> int:
        return int(sum(self.ntotals))

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def lazy(self) -> bool:
        """Whether shards are read (memory-mapped) at search time rather than held."""
        return any(s is None for s in self.shards)

    def to_gpu(self) -> ShardedIndex:
        """Move shards to the GPU(s) when wanted and possible (HNSW stays on the CPU)."""
        if not _want_gpu(self.spec.use_gpu):
            return self
        res = faiss.StandardGpuResources()
        moved = []
        for i in range(len(self.shards)):
            s = self._open(i)
            try:
                moved.append(faiss.index_cpu_to_gpu(res, i % faiss.get_num_gpus(), s))
            except RuntimeError as e:  # e.g. HNSW has no GPU version
                log.warning("index shard %d stays on CPU: %s", i, e)
                moved.append(s)
        self.shards, self._gpu_res = moved, res
        self._cpu_copies = {}
        for s in self.shards:
            _set_params(s, self.spec.params)
        return self

    def _open(self, s: int) -> faiss.Index:
        """Shard `s`: the resident index, or its file read memory-mapped (search params set)."""
        if self.shards[s] is not None:
            return self.shards[s]
        shard = faiss.read_index(str(self.paths[s]), MMAP_FLAGS)
        _set_params(shard, self.spec.params)
        return shard

    def search(self, queries: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-n rows by inner product: (scores float32 [nq, n], rows int64 [nq, n], -1 = none).

        Shard after shard, each searched for every query and merged into the running top-n
        (stable: ties keep the lower shard first, as one concatenated ranking would)."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if q.ndim != 2 or (len(q) and q.shape[1] != self.dim):
            raise ValueError(f"queries must be [nq, {self.dim}], got {q.shape}")
        scores = np.full((len(q), max(n, 0)), -np.inf, dtype=np.float32)
        rows = np.full((len(q), max(n, 0)), -1, dtype=np.int64)
        if n <= 0 or len(q) == 0 or self.ntotal == 0:
            return scores, rows
        bs = max(1, self.spec.search_batch_size)
        if self.spec.blas_threshold is not None:
            faiss.cvar.distance_compute_blas_threshold = int(self.spec.blas_threshold)
        for s_idx, off in enumerate(self.offsets):
            k = min(n, self.ntotals[s_idx])
            if k == 0:
                continue
            shard = self._open(s_idx)
            searcher = self._shard_for(s_idx, shard, k)
            for b in range(0, len(q), bs):
                d, i = searcher.search(q[b : b + bs], k)
                d = np.where(i >= 0, d, -np.inf).astype(np.float32)
                i = np.where(i >= 0, i + off, -1)
                scores[b : b + bs], rows[b : b + bs] = merge_top_n(
                    scores[b : b + bs], rows[b : b + bs], d, i, n
                )
            del shard, searcher  # a memory-mapped shard's pages are released here
        return scores, rows

    def _shard_for(self, s: int, shard: faiss.Index, k: int) -> faiss.Index:
        """`shard`, or for k above faiss-GPU's selection limit a CPU copy of it (made once,
        with the same search parameters), so the doubling search of fine-grained units can ask
        for any n."""
        if k <= GPU_MAX_K or not _is_gpu(shard):
            return shard
        if s not in self._cpu_copies:
            log.warning(
                "top-%d exceeds the faiss GPU limit (%d): shard %d is searched on a CPU copy",
                k,
                GPU_MAX_K,
                s,
            )
            cpu = _to_cpu(shard)
            _set_params(cpu, self.spec.params)
            self._cpu_copies[s] = cpu
        return self._cpu_copies[s]

    def save(self, out_dir: str | Path, **manifest: Any) -> Path:
        """One file per shard (written atomically), then the manifest: its presence = complete."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        files = []
        for i, shard in enumerate(self.shards):
            name = shard_file_name(i, len(self.shards))
            if shard is not None:
                write_shard_index(shard, out / name)
            elif self.paths[i] != out / name:
                raise ValueError(f"shard {i} lives in {self.paths[i]}, not in {out}")
            files.append(
                {
                    "file": name,
                    "offset": self.offsets[i],
                    "ntotal": self.ntotals[i],
                    "record": file_record(out / name),  # size + hash, verified on load
                }
            )
        write_manifest(
            out / "manifest.json",
            kind="faiss_index",
            spec={**dataclasses.asdict(self.spec), "params": dict(self.spec.params)},
            ntotal=self.ntotal,
            dim=self.dim,
            shards=files,
            **self.info,
            **manifest,
        )
        return out

    @classmethod
    def load(cls, index_dir: str | Path, spec: IndexSpec | None = None) -> ShardedIndex:
        """Load a saved index; `spec` may override runtime settings (GPU use, search params)."""
        d = Path(index_dir)
        man = read_json(d / "manifest.json")
        if man.get("kind") != "faiss_index":
            raise DataError(d / "manifest.json", None, "kind", "not a faiss index manifest")
        saved = IndexSpec.from_cfg(man["spec"])
        spec = spec or saved
        problems = verify_files(d, {e["file"]: e.get("record") for e in man["shards"]})
        if problems:
            path, why = problems[0]
            err = DamagedArtifact(path, None, None, f"damaged index shard: {why}")
            err.problems = problems
            raise err
        paths = [d / e["file"] for e in man["shards"]]
        for path in paths:
            if not path.exists():
                raise DataError(path, None, None, "index shard listed in the manifest is missing")
        size = sum(p.stat().st_size for p in paths)
        lazy = not _want_gpu(spec.use_gpu) and size > spec.memory_budget_gb * (1 << 30)
        shards: list[faiss.Index | None] = []
        for path, entry in zip(paths, man["shards"]):
            # over the memory budget: each shard is read memory-mapped when searched
            shard = faiss.read_index(str(path), MMAP_FLAGS if lazy else 0)
            if shard.ntotal != entry["ntotal"]:
                raise DataError(
                    path, None, "ntotal", f"{shard.ntotal} != manifest {entry['ntotal']}"
                )
            _set_params(shard, spec.params)
            shards.append(None if lazy else shard)
            del shard
        if lazy:
            log.info(
                "index %s: %.1f GB > index.memory_budget_gb=%s, searched memory-mapped shard by "
                "shard (%d shards)",
                d,
                size / (1 << 30),
                spec.memory_budget_gb,
                len(paths),
            )
        index = cls(
            shards,
            [e["offset"] for e in man["shards"]],
            spec,
            paths=paths,
            ntotals=[int(e["ntotal"]) for e in man["shards"]],
            dim=int(man["dim"]),
        )
        index.info = {k: man[k] for k in ("recall", "build_seconds") if k in man}
        measured_with = index.info.get("recall", {}).get("params")
        if measured_with is not None and measured_with != dict(spec.params):
            log.info(
                "index %s: stored recall was measured with %s, searching with %s",
                d,
                measured_with,
                dict(spec.params),
            )
        return index.to_gpu()


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


def build_index(vectors: Any, spec: IndexSpec | Mapping[str, Any] | None = None) -> ShardedIndex:
    """Build (and train, for IVF/PQ) an inner-product index over `vectors`, split into shards.

    `vectors` is a float array [n, d] or an `EmbeddingStore` (streamed, never concatenated).
    Approximate indexes get their recall vs exact search measured (`spec.recall_queries`).
    """
    spec = spec if isinstance(spec, IndexSpec) else IndexSpec.from_cfg(spec)
    t0 = time.perf_counter()
    ntotal = int(len(vectors))
    dim = int(vectors.dim if hasattr(vectors, "dim") else np.asarray(vectors).shape[1])
    template, factory = _trained_template(vectors, ntotal, dim, spec)
    bounds = shard_bounds(ntotal, spec.num_shards)
    shards = list(filled_shards(template, vectors, bounds))
    for shard in shards:
        _set_params(shard, spec.params)
    index = ShardedIndex(shards, bounds[:-1], spec)
    index.info = {"factory": factory}
    _measure(index, vectors, spec, factory)
    index.info["build_seconds"] = round(time.perf_counter() - t0, 3)
    return index.to_gpu()


def filled_shards(template: faiss.Index, vectors: Any, bounds: list[int]) -> Iterator[faiss.Index]:
    """Shard after shard (rows bounds[i]..bounds[i+1], each a clone of `template`), filled in
    one streamed pass over `vectors` and yielded as soon as it is full; an empty corpus gives
    one empty shard."""
    s, shard = 0, faiss.clone_index(template)
    for start, arr in iter_arrays(vectors):  # shards are contiguous row ranges
        pos = 0
        while pos < len(arr):
            take = min(len(arr) - pos, bounds[s + 1] - (start + pos))
            shard.add(arr[pos : pos + take])
            pos += take
            if start + pos == bounds[s + 1]:
                yield shard
                s, shard = s + 1, faiss.clone_index(template)
    if s < len(bounds) - 1:
        yield shard


def shard_file_name(i: int, count: int) -> str:
    """The file of index shard `i` of `count`."""
    return f"shard-{i:03d}-of-{count:03d}.faiss"


def write_shard_index(shard: faiss.Index, path: Path) -> None:
    """One shard (a GPU one copied to the CPU first) to `path`, atomically."""
    cpu = faiss.index_gpu_to_cpu(shard) if _is_gpu(shard) else shard
    with atomic_open(path, "wb") as f:
        faiss.write_index(cpu, faiss.PyCallbackIOWriter(f.write))


def shards_for_budget(ntotal: int, bytes_per_vector: int, spec: IndexSpec) -> int:
    """`spec.num_shards`, raised so that no shard exceeds `spec.memory_budget_gb`."""
    budget = max(1, int(spec.memory_budget_gb * (1 << 30)))
    return max(int(spec.num_shards), -(-ntotal * bytes_per_vector // budget))


def build_index_to_dir(
    vectors: Any, spec: IndexSpec | Mapping[str, Any] | None, out_dir: str | Path, **manifest: Any
) -> ShardedIndex:
    """`build_index`, holding one shard at a time: each shard is built from streamed vectors,
    written to `out_dir` and released, then the manifest is written and the index loaded (held
    in RAM, or memory-mapped shard by shard when over `spec.memory_budget_gb`). Peak memory:
    one shard plus the training sample, whatever the corpus size."""
    spec = spec if isinstance(spec, IndexSpec) else IndexSpec.from_cfg(spec)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    ntotal = int(len(vectors))
    dim = int(vectors.dim if hasattr(vectors, "dim") else np.asarray(vectors).shape[1])
    template, factory = _trained_template(vectors, ntotal, dim, spec)
    per_vector = max(1, int(getattr(template, "code_size", dim * 4)))
    bounds = shard_bounds(ntotal, shards_for_budget(ntotal, per_vector, spec))
    n_shards = len(bounds) - 1
    for s, shard in enumerate(filled_shards(template, vectors, bounds)):
        write_shard_index(shard, out / shard_file_name(s, n_shards))  # then released
        del shard
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


def merge_top_n(
    d1: np.ndarray, i1: np.ndarray, d2: np.ndarray, i2: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """The n best of two rankings per query (scores desc; stable: ties keep `d1`'s first)."""
    d = np.concatenate([d1, d2], axis=1)
    i = np.concatenate([i1, i2], axis=1)
    order = np.argsort(-d, axis=1, kind="stable")[:, :n]
    return np.take_along_axis(d, order, axis=1), np.take_along_axis(i, order, axis=1)


def exact_knn(vectors: Any, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k (k <= number of vectors) over streamed blocks, with faiss's
    `knn_ground_truth` (no second full index in memory)."""
    from faiss.contrib.exhaustive_search import knn_ground_truth

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
