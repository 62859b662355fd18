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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from densex.utils.integrity import DamagedArtifact, file_record, verify_files
from densex.utils.io import DataError, atomic_open, read_json, write_manifest
from densex.utils.logging import get_logger

log = get_logger(__name__)

# faiss GPU indexes assert k <= GPU_MAX_SELECTION_K (2048); larger searches go to a CPU copy.
GPU_MAX_K = 2048
# Search-time settings: applied when an index is loaded, never part of its build key.
SEARCH_KEYS = ("use_gpu", "search_batch_size", "params", "recall_queries", "recall_k")


@dataclass(frozen=True)
class IndexSpec:
    """A `conf/index/*.yaml` node."""

    name: str = "flat"
    factory: str = "Flat"  # faiss.index_factory string; "{nlist}" -> 4*sqrt(n) (capped)
    num_shards: int = 1
    use_gpu: Any = "auto"  # auto | true | false
    search_batch_size: int = 256
    train_size: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)  # nprobe, efSearch, ...
    recall_queries: int = 0
    recall_k: int = 10
    seed: int = 0

    @classmethod
    def from_cfg(cls, cfg: Mapping[str, Any] | Any | None) -> IndexSpec:
        if cfg is None:
            return cls()
        from densex.retrieval.encoders import _to_dict

        data = _to_dict(cfg)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"index {data.get('name')!r}: unknown config keys {unknown}")
        data["params"] = dict(data.get("params") or {})
        return cls(**data)

    @property
    def exact(self) -> bool:
        return self.factory.replace(" ", "") == "Flat"

    def cache_fields(self) -> dict[str, Any]:
        """What changes the stored index. GPU use, batch size and search parameters (nprobe,
        efSearch) are applied at load time, and the recall check only measures, so changing them
        reuses the index (the manifest's recall says which `params` it was measured with)."""
        d = dataclasses.asdict(self)
        for k in SEARCH_KEYS:
            d.pop(k)
        return d


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
    """Row-range shards of one logical inner-product index; `search` merges their top-n."""

    def __init__(self, shards: list[faiss.Index], offsets: list[int], spec: IndexSpec) -> None:
        if len(shards) != len(offsets):
            raise ValueError("one offset per shard")
        self.shards, self.offsets, self.spec = shards, offsets, spec
        self.info: dict[str, Any] = {}
        self._cpu_copies: dict[int, faiss.Index] = {}

    @property
    def ntotal(self) -> int:
        return int(sum(s.ntotal for s in self.shards))

    @property
    def dim(self) -> int:
        return int(self.shards[0].d)

    def to_gpu(self) -> ShardedIndex:
        """Move shards to the GPU(s) when wanted and possible (HNSW stays on the CPU)."""
        if not _want_gpu(self.spec.use_gpu):
            return self
        res = faiss.StandardGpuResources()
        moved = []
        for i, s in enumerate(self.shards):
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

    def search(self, queries: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-n rows by inner product: (scores float32 [nq, n], rows int64 [nq, n], -1 = none)."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if q.ndim != 2 or (len(q) and q.shape[1] != self.dim):
            raise ValueError(f"queries must be [nq, {self.dim}], got {q.shape}")
        scores = np.full((len(q), n), -np.inf, dtype=np.float32)
        rows = np.full((len(q), n), -1, dtype=np.int64)
        if n <= 0 or len(q) == 0 or self.ntotal == 0:
            return scores, rows
        bs = max(1, self.spec.search_batch_size)
        for b in range(0, len(q), bs):
            qb = q[b : b + bs]
            parts_d, parts_i = [], []
            for s_idx, (shard, off) in enumerate(zip(self.shards, self.offsets)):
                k = min(n, shard.ntotal)
                if k == 0:
                    continue
                d, i = self._shard_for(s_idx, k).search(qb, k)
                parts_d.append(np.where(i >= 0, d, -np.inf).astype(np.float32))
                parts_i.append(np.where(i >= 0, i + off, -1))
            d = np.concatenate(parts_d, axis=1)
            i = np.concatenate(parts_i, axis=1)
            if len(parts_d) > 1:  # merge: stable, so ties keep the lower row first
                order = np.argsort(-d, axis=1, kind="stable")[:, :n]
                d = np.take_along_axis(d, order, axis=1)
                i = np.take_along_axis(i, order, axis=1)
            m = min(n, d.shape[1])
            scores[b : b + bs, :m], rows[b : b + bs, :m] = d[:, :m], i[:, :m]
        return scores, rows

    def _shard_for(self, s: int, k: int) -> faiss.Index:
        """Shard `s`, or for k above faiss-GPU's selection limit a CPU copy of it (made once,
        with the same search parameters), so the doubling search of fine-grained units can ask
        for any n."""
        shard = self.shards[s]
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
            cpu = faiss.index_gpu_to_cpu(shard) if _is_gpu(shard) else shard
            name = f"shard-{i:03d}-of-{len(self.shards):03d}.faiss"
            with atomic_open(out / name, "wb") as f:
                faiss.write_index(cpu, faiss.PyCallbackIOWriter(f.write))
            files.append(
                {
                    "file": name,
                    "offset": self.offsets[i],
                    "ntotal": int(shard.ntotal),
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
        shards = []
        for entry in man["shards"]:
            path = d / entry["file"]
            if not path.exists():
                raise DataError(path, None, None, "index shard listed in the manifest is missing")
            shard = faiss.read_index(str(path))
            if shard.ntotal != entry["ntotal"]:
                raise DataError(
                    path, None, "ntotal", f"{shard.ntotal} != manifest {entry['ntotal']}"
                )
            _set_params(shard, spec.params)
            shards.append(shard)
        index = cls(shards, [e["offset"] for e in man["shards"]], spec)
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
    factory = spec.factory.replace("{nlist}", str(_nlist(ntotal)))
    template = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    if not template.is_trained:
        sample = _train_sample(vectors, ntotal, spec.train_size or ntotal, spec.seed)
        log.info("training %s on %d vectors", factory, len(sample))
        template.train(sample)
    bounds = shard_bounds(ntotal, spec.num_shards)
    shards = [faiss.clone_index(template) for _ in range(len(bounds) - 1)]
    for start, arr in iter_arrays(vectors):
        for s, shard in enumerate(shards):
            lo, hi = max(start, bounds[s]), min(start + len(arr), bounds[s + 1])
            if lo < hi:
                shard.add(arr[lo - start : hi - start])
    for shard in shards:
        _set_params(shard, spec.params)
    index = ShardedIndex(shards, bounds[:-1], spec)
    index.info = {"factory": factory}
    if not spec.exact and spec.recall_queries > 0 and ntotal > 0:
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
    index.info["build_seconds"] = round(time.perf_counter() - t0, 3)
    return index.to_gpu()


def exact_knn(vectors: Any, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k over streamed blocks (no second full index in memory)."""
    q = np.ascontiguousarray(queries, dtype=np.float32)
    best_d = np.full((len(q), 0), -np.inf, dtype=np.float32)
    best_i = np.full((len(q), 0), -1, dtype=np.int64)
    for start, arr in iter_arrays(vectors):
        kk = min(k, len(arr))
        d, i = faiss.knn(q, arr, kk, metric=faiss.METRIC_INNER_PRODUCT)
        d = np.concatenate([best_d, d], axis=1)
        i = np.concatenate([best_i, i + start], axis=1)
        order = np.argsort(-d, axis=1, kind="stable")[:, :k]
        best_d, best_i = np.take_along_axis(d, order, 1), np.take_along_axis(i, order, 1)
    return best_d, best_i


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
