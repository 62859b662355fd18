"""`ShardedIndex`: row-range shards of one inner-product index, searched and merged, saved.

A shard is resident (a faiss index in RAM or on a GPU) or, for an index over
`index.memory_budget_gb`, a file read memory-mapped when searched and released right after.
Each shard's top-n is merged into a running top-n (`merge_top_n`, stable: equal to one
concatenated ranking). On disk: one `shard-III-of-NNN.faiss` per shard, written atomically,
then `manifest.json` (its presence = complete; each shard's size + hash, verified on load).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from densex.retrieval.faiss_gpu import GPU_MAX_K, is_gpu, set_search_params, to_cpu, want_gpu
from densex.retrieval.search import is_descending
from densex.retrieval.spec import IndexSpec
from densex.utils.integrity import DamagedArtifact, file_record, verify_files
from densex.utils.io import DataError, atomic_open, read_json, write_manifest
from densex.utils.logging import get_logger

log = get_logger(__name__)

__all__ = ["MMAP_FLAGS", "ShardedIndex", "merge_top_n", "shard_file_name", "write_shard_index"]

# memory-mapped reads: flat codes (IFC) and inverted lists (IVF) stay on disk until touched
MMAP_FLAGS = faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY
# this faiss build's own BLAS threshold, what `index.blas_threshold=null` restores
FAISS_BLAS_THRESHOLD = int(faiss.cvar.distance_compute_blas_threshold)


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
        """Number of vectors over all shards."""
        return int(sum(self.ntotals))

    @property
    def dim(self) -> int:
        """Vector dimension."""
        return self._dim

    @property
    def lazy(self) -> bool:
        """Whether shards are read (memory-mapped) at search time rather than held."""
        return any(s is None for s in self.shards)

    def to_gpu(self) -> ShardedIndex:
        """Move shards to the GPU(s) when wanted and possible (HNSW stays on the CPU)."""
        if not want_gpu(self.spec.use_gpu):
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
            set_search_params(s, self.spec.params)
        return self

    def _open(self, s: int) -> faiss.Index:
        """Shard `s`: the resident index, or its file read memory-mapped (search params set)."""
        if self.shards[s] is not None:
            return self.shards[s]
        shard = faiss.read_index(str(self.paths[s]), MMAP_FLAGS)
        set_search_params(shard, self.spec.params)
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
        threshold = self.spec.blas_threshold
        # process-wide in faiss: set for every search, so one index's setting never leaks
        faiss.cvar.distance_compute_blas_threshold = int(
            FAISS_BLAS_THRESHOLD if threshold is None else threshold
        )
        empty = True  # nothing merged yet: a best-first result is the running top-n
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
                if empty and is_descending(d):  # what merging into nothing gives
                    scores[b : b + bs, :k], rows[b : b + bs, :k] = d, i
                else:
                    scores[b : b + bs], rows[b : b + bs] = merge_top_n(
                        scores[b : b + bs], rows[b : b + bs], d, i, n
                    )
            empty = False
            del shard, searcher  # a memory-mapped shard's pages are released here
        return scores, rows

    def _shard_for(self, s: int, shard: faiss.Index, k: int) -> faiss.Index:
        """`shard`, or for k above faiss-GPU's selection limit a CPU copy of it (made once,
        with the same search parameters), so the doubling search of fine-grained units can ask
        for any n."""
        if k <= GPU_MAX_K or not is_gpu(shard):
            return shard
        if s not in self._cpu_copies:
            log.warning(
                "top-%d exceeds the faiss GPU limit (%d): shard %d is searched on a CPU copy",
                k,
                GPU_MAX_K,
                s,
            )
            cpu = to_cpu(shard)
            set_search_params(cpu, self.spec.params)
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
        lazy = not want_gpu(spec.use_gpu) and size > spec.memory_budget_gb * (1 << 30)
        shards: list[faiss.Index | None] = []
        for path, entry in zip(paths, man["shards"]):
            # over the memory budget: each shard is read memory-mapped when searched
            shard = faiss.read_index(str(path), MMAP_FLAGS if lazy else 0)
            if shard.ntotal != entry["ntotal"]:
                raise DataError(
                    path, None, "ntotal", f"{shard.ntotal} != manifest {entry['ntotal']}"
                )
            set_search_params(shard, spec.params)
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


def merge_top_n(
    d1: np.ndarray, i1: np.ndarray, d2: np.ndarray, i2: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """The n best of two rankings per query (scores desc; stable: ties keep `d1`'s first)."""
    d = np.concatenate([d1, d2], axis=1)
    i = np.concatenate([i1, i2], axis=1)
    order = np.argsort(-d, axis=1, kind="stable")[:, :n]
    return np.take_along_axis(d, order, axis=1), np.take_along_axis(i, order, axis=1)


def shard_file_name(i: int, count: int) -> str:
    """The file of index shard `i` of `count`."""
    return f"shard-{i:03d}-of-{count:03d}.faiss"


def write_shard_index(shard: faiss.Index, path: Path) -> None:
    """One shard (a GPU one copied to the CPU first) to `path`, atomically."""
    cpu = faiss.index_gpu_to_cpu(shard) if is_gpu(shard) else shard
    with atomic_open(path, "wb") as f:
        faiss.write_index(cpu, faiss.PyCallbackIOWriter(f.write))
