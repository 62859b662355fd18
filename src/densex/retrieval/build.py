"""Units file + retriever + index settings -> a cached `UnitSearcher`.

Embeddings are keyed by (units file SHA-256, the retriever fields that change document vectors,
`precision` among them), indexes by (embeddings key, index build settings; search parameters
such as nprobe/efSearch are applied at load time), so the jobs of a sweep that share a corpus,
granularity and retriever share one encoding and one index, and a changed input never reuses a
stale artifact. A second call loads both and encodes nothing. The units file's SHA-256 and line
count come from its units manifest (`corpus.units_digest`), so a second process reads none of
its bytes to find its embeddings.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from densex.corpus.units_digest import units_digest
from densex.retrieval.bm25 import BM25Searcher, bm25_settings
from densex.retrieval.embedding_store import EmbeddingStore, open_embeddings
from densex.retrieval.encode import encode_units_to_dir
from densex.retrieval.encoders import DenseRetriever
from densex.retrieval.faiss_index import build_index_to_dir
from densex.retrieval.search import UnitSearcher
from densex.retrieval.sharded_index import ShardedIndex
from densex.retrieval.spec import BM25Spec, IndexSpec, RetrieverSpec
from densex.utils.cache import artifact_dir, content_key
from densex.utils.distributed import global_rank
from densex.utils.integrity import (
    CacheSpec,
    DamagedArtifact,
    file_hash,
    handle_damage,
    policy,
    remove_orphans,
)
from densex.utils.io import DataError, read_json
from densex.utils.locks import build_once
from densex.utils.logging import get_logger

log = get_logger(__name__)


def shard_size_for(n_units: int, settings: dict[str, Any] | None = None) -> int:
    """Rows per embedding shard: `cache.embedding_shard_size` when it is an int, else (`auto`)
    `clamp(min(ceil(n / shard_target_count), shard_max_seconds * shard_units_per_second),
    shard_min_size, shard_max_size)`: a corpus has at least ~`shard_target_count` shards, a
    kill loses at most one shard per process, i.e. about `shard_max_seconds` of encoding at the
    assumed speed, and 257M units still get 50k-row shards (~5k files)."""
    defaults = dataclasses.asdict(CacheSpec())  # the `cache` group's defaults
    cfg = {**defaults, **{k: v for k, v in (settings or {}).items() if v is not None}}
    fixed = cfg["embedding_shard_size"]
    if str(fixed) != "auto":
        if int(fixed) < 1:
            raise ValueError(f"cache.embedding_shard_size must be >= 1 or auto, got {fixed!r}")
        return int(fixed)
    by_count = -(-max(n_units, 1) // int(cfg["shard_target_count"]))
    by_time = int(float(cfg["shard_max_seconds"]) * float(cfg["shard_units_per_second"]))
    lo, hi = int(cfg["shard_min_size"]), int(cfg["shard_max_size"])
    return max(lo, min(hi, by_count, max(1, by_time)))


def count_lines(path: str | Path, chunk: int = 16 << 20) -> int:
    """Newline-terminated lines of a file (streamed; the units files end every row with one)."""
    n = 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            n += block.count(b"\n")
    return n


def default_shard_size(units_path: str | Path) -> int:
    """`shard_size_for` the units file's lines (`count_lines`; recorded by the units stage:
    `corpus.units_digest`), with the `cache` settings of this process."""

    return shard_size_for(units_digest(units_path).lines, policy())


class EncodedUnits:
    """What a ddp rank other than 0 gets: the units are encoded (every shard on disk), the
    index is rank 0's to build and search."""

    def __init__(self, ntotal: int, info: dict[str, Any]) -> None:
        self.ntotal, self.info = ntotal, info

    def search(self, queries: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray]:
        raise RuntimeError("only rank 0 searches: this rank took part in encoding only")


class DenseSearcher:
    """Query encoder + faiss index over the unit embeddings of one units file. `query_vectors`
    (set by `retrieval.query_cache` for an evaluate cell): texts -> their cached float32
    vectors, or None to encode them."""

    def __init__(self, retriever: DenseRetriever, index: ShardedIndex, store: EmbeddingStore):
        if index.ntotal != len(store):
            raise ValueError(f"index has {index.ntotal} vectors for {len(store)} units")
        self.retriever, self.index, self._store = retriever, index, store
        self.info: dict[str, Any] = {}
        self.query_vectors: Callable[[Sequence[str]], np.ndarray | None] | None = None

    @property
    def unit_ids(self) -> list[str]:
        """The unit ids in row order (read on first use: one string per unit)."""
        return self._store.ids

    @property
    def ntotal(self) -> int:
        return self.index.ntotal

    def search(self, queries: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores float32 [nq, n], rows int64 [nq, n]); -1 where fewer than n units exist.
        The queries' cached vectors when `query_vectors` has them, else encoded here."""
        vectors = self.query_vectors(queries) if self.query_vectors is not None else None
        if vectors is None:
            vectors = self.retriever.encode_queries(list(queries))
        return self.index.search(vectors, n)


def share_query_encoders(searchers: Iterable[Any]) -> int:
    """Give the dense searchers among `searchers` that have the same retriever spec one
    `DenseRetriever`, so its query encoder loads once (on the first search) for all of them,
    nested searchers included (a union's `searchers`, a fusion's `members`). Returns the
    number of distinct retrievers left."""
    shared: dict[str, DenseRetriever] = {}
    for s in dense_searchers(searchers):
        s.retriever = shared.setdefault(repr(s.retriever.spec), s.retriever)
    return len(shared)


def dense_searchers(searchers: Iterable[Any]) -> Iterator[DenseSearcher]:
    """The `DenseSearcher`s among `searchers` and nested in them (a union's `searchers`, a
    fusion's `members`), in order."""
    for s in searchers:
        if isinstance(s, DenseSearcher):
            yield s
        elif hasattr(s, "searchers"):
            yield from dense_searchers(s.searchers)
        elif hasattr(s, "members"):
            yield from dense_searchers(m.searcher for m in s.members)


def embeddings_dir(
    units_path: str | Path,
    spec: RetrieverSpec,
    cache_dir: str | Path,
    shard_size: int | None = None,
) -> Path:
    """`<cache>/embeddings/<retriever>/<key>`; `shard_size` None = `default_shard_size`."""
    shard_size = shard_size or default_shard_size(units_path)
    key = content_key(
        units=units_digest(units_path).sha256,
        retriever=spec.cache_fields("doc"),
        shard_size=shard_size,
    )
    return artifact_dir(cache_dir, "embeddings", spec.name, key=key)


def load_or_build_searcher(
    units_path: str | Path,
    retriever: RetrieverSpec | BM25Spec,
    index: IndexSpec | None,
    cache_dir: str | Path,
    trainer_args: dict[str, Any] | None = None,
    shard_size: int | None = None,
) -> UnitSearcher:
    """The searcher for (units, retriever, index), built once per content key and then loaded.

    A `BM25Spec` gives a `BM25Searcher` (`index` is not used); a `RetrieverSpec` unit
    embeddings (Lightning predict with the trainer group's plain `trainer_args`) and a faiss
    index (`index` None: `IndexSpec()`'s exact flat one).
    """
    units_path = Path(units_path)
    if not units_path.exists():
        raise DataError(units_path, None, None, "units file not found")
    if isinstance(retriever, BM25Spec):
        return _load_or_build_bm25(units_path, retriever, cache_dir)

    spec = retriever
    if spec.export_dir is None:  # exported encoders (runtime onnx/openvino) beside the rest
        spec = dataclasses.replace(spec, export_dir=str(Path(cache_dir) / "exports"))
    shard_size = shard_size or default_shard_size(units_path)
    emb_dir = embeddings_dir(units_path, spec, cache_dir, shard_size)
    # verified (size + hash per shard) before reuse; damaged shards alone are re-encoded
    store = open_embeddings(emb_dir)
    if store is None:  # shards claimed one by one: concurrent processes share the encoding
        store = encode_units_to_dir(units_path, spec, emb_dir, trainer_args, shard_size=shard_size)
    encoded = store.encoded_rows > 0

    if global_rank() != 0:  # ddp: every rank encoded its shards; rank 0 alone builds the index
        return EncodedUnits(len(store), {"embeddings_dir": str(emb_dir), "encoded": encoded})
    ispec = index if index is not None else IndexSpec()
    index, idx_dir, built = _load_or_build_index(
        store, spec, ispec, emb_dir, cache_dir, units_path, encoded
    )
    log.info(
        "%s searcher over %d units (%s embeddings, %s index %s)",
        spec.name,
        index.ntotal,
        f"new ({store.encoded_rows} units encoded here)" if encoded else "cached",
        "new" if built else "cached",
        idx_dir,
    )
    searcher = DenseSearcher(DenseRetriever(spec), index, store)
    searcher.info = {
        "embeddings_dir": str(emb_dir),
        "index_dir": str(idx_dir),
        "encoded": encoded,
        "index_built": built,
        **({"index_recall": index.info["recall"]} if "recall" in index.info else {}),
    }
    return searcher


def _load_or_build_index(
    store: Any, spec: RetrieverSpec, ispec: IndexSpec, emb_dir: Path, cache_dir: str | Path,
    units_path: Path, encoded_here: bool,
) -> tuple[ShardedIndex, Path, bool]:  # fmt: skip
    """The faiss index of `store` under `ispec`, keyed by (embeddings, build settings): loaded
    when cached, intact and built from these embeddings (the hash of their manifest), search
    settings applied; else built one shard at a time, once across processes (`utils.locks`);
    returns (index, its dir, whether this process built it)."""
    key = content_key(embeddings=emb_dir.name, index=ispec.cache_fields())
    idx_dir = artifact_dir(cache_dir, "index", spec.name, ispec.name, key=key)
    remove_orphans(idx_dir)
    source = file_hash(emb_dir / "manifest.json")

    def reuse() -> ShardedIndex | None:
        if not (idx_dir / "manifest.json").exists():
            return None
        built_from = read_json(idx_dir / "manifest.json").get("embeddings_manifest")
        if built_from != source and (built_from is not None or encoded_here):
            return None  # built from other (re-encoded) embeddings
        try:
            return ShardedIndex.load(idx_dir, ispec)
        except DamagedArtifact as e:
            handle_damage(e.problems, "index", f"rebuild: rm -r {idx_dir}")
            (idx_dir / "manifest.json").unlink(missing_ok=True)
            return None

    built: list[bool] = []

    def build() -> ShardedIndex:
        built.append(True)
        (idx_dir / "manifest.json").unlink(missing_ok=True)  # a stale index is not complete
        return build_index_to_dir(
            store, ispec, idx_dir, embeddings_dir=str(emb_dir), embeddings_manifest=source,
            units_sha256=units_digest(units_path).sha256,
        )  # fmt: skip

    index = build_once(idx_dir, "index", reuse, build)
    return index, idx_dir, bool(built)


def _load_or_build_bm25(units_path: Path, spec: BM25Spec, cache_dir: str | Path) -> BM25Searcher:
    settings = bm25_settings(spec)
    key = content_key(units=units_digest(units_path).sha256, bm25=settings)
    out = artifact_dir(cache_dir, "bm25", settings["name"], key=key)
    remove_orphans(out.parent)  # build dirs of a killed earlier build (`.<key>.<host>-<pid>...`)
    built: list[bool] = []

    def reuse() -> BM25Searcher | None:
        if not (out / "manifest.json").exists():
            return None
        try:
            return BM25Searcher.load(out)
        except DamagedArtifact as e:
            handle_damage(e.problems, "bm25 index", f"rebuild: rm -r {out}")
            shutil.rmtree(out)
            return None

    def build() -> BM25Searcher:
        built.append(True)
        BM25Searcher.build(units_path, spec).save(out, units_sha256=units_digest(units_path).sha256)
        return BM25Searcher.load(out)

    searcher = build_once(out, "bm25 index", reuse, build)  # once across processes
    searcher.info = {"index_dir": str(out), "index_built": bool(built), "encoded": False}
    return searcher
