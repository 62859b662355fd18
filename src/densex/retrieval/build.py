"""Units file + retriever + index settings -> a cached `UnitSearcher`.

Embeddings are keyed by (units file hash, the retriever fields that change document vectors,
`precision` among them), indexes by (embeddings key, index build settings; search parameters
such as nprobe/efSearch are applied at load time), so the jobs of a sweep that share a corpus,
granularity and retriever share one encoding and one index, and a changed input never reuses a
stale artifact. A second call loads both and encodes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from densex.retrieval.bm25 import BM25Searcher, bm25_settings
from densex.retrieval.encode import EmbeddingStore, encode_units_to_dir
from densex.retrieval.encoders import DenseRetriever, RetrieverSpec, _to_dict
from densex.retrieval.faiss_index import IndexSpec, ShardedIndex, build_index
from densex.utils.cache import artifact_dir, content_key, hash_file
from densex.utils.io import DataError
from densex.utils.logging import get_logger

log = get_logger(__name__)

DEFAULT_SHARD_SIZE = 50_000


@runtime_checkable
class UnitSearcher(Protocol):
    """What passage search needs: top-n unit rows per query (-1 = no more units)."""

    unit_ids: list[str]

    @property
    def ntotal(self) -> int: ...

    def search(self, queries: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray]: ...


class DenseSearcher:
    """Query encoder + faiss index over the unit embeddings of one units file."""

    def __init__(self, retriever: DenseRetriever, index: ShardedIndex, unit_ids: Sequence[str]):
        if index.ntotal != len(unit_ids):
            raise ValueError(f"index has {index.ntotal} vectors for {len(unit_ids)} unit ids")
        self.retriever, self.index, self.unit_ids = retriever, index, list(unit_ids)
        self.info: dict[str, Any] = {}

    @property
    def ntotal(self) -> int:
        return self.index.ntotal

    def search(self, queries: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores float32 [nq, n], rows int64 [nq, n]); -1 where fewer than n units exist."""
        return self.index.search(self.retriever.encode_queries(list(queries)), n)


def embeddings_dir(
    units_path: str | Path,
    spec: RetrieverSpec,
    cache_dir: str | Path,
    shard_size: int = DEFAULT_SHARD_SIZE,
) -> Path:
    key = content_key(
        units=hash_file(units_path), retriever=spec.cache_fields("doc"), shard_size=shard_size
    )
    return artifact_dir(cache_dir, "embeddings", spec.name, key=key)


def load_or_build_searcher(
    units_path: str | Path,
    retriever_cfg: Mapping[str, Any] | Any,
    index_cfg: Mapping[str, Any] | Any | None,
    cache_dir: str | Path,
    trainer_cfg: Mapping[str, Any] | Any | None = None,
    shard_size: int = DEFAULT_SHARD_SIZE,
) -> UnitSearcher:
    """The searcher for (units, retriever, index), built once per content key and then loaded.

    `retriever_cfg.type == "sparse"` gives a `BM25Searcher` (`index_cfg` is not used);
    otherwise unit embeddings (Lightning predict, `trainer_cfg`) and a faiss index.
    """
    units_path = Path(units_path)
    if not units_path.exists():
        raise DataError(units_path, None, None, "units file not found")
    rcfg = _to_dict(retriever_cfg)
    if rcfg.get("type", "dense") == "sparse":
        return _load_or_build_bm25(units_path, rcfg, cache_dir)

    spec = RetrieverSpec.from_cfg(rcfg)
    emb_dir = embeddings_dir(units_path, spec, cache_dir, shard_size)
    encoded = not (emb_dir / "manifest.json").exists()
    if encoded:
        store = encode_units_to_dir(units_path, spec, emb_dir, trainer_cfg, shard_size=shard_size)
    else:
        store = EmbeddingStore.open(emb_dir)

    ispec = IndexSpec.from_cfg(index_cfg)
    emb_key = emb_dir.name
    idx_dir = artifact_dir(
        cache_dir,
        "index",
        spec.name,
        ispec.name,
        key=content_key(embeddings=emb_key, index=ispec.cache_fields()),
    )
    built = not (idx_dir / "manifest.json").exists()
    if built:
        index = build_index(store, ispec)
        index.save(idx_dir, embeddings_dir=str(emb_dir), units_sha256=hash_file(units_path))
    else:
        index = ShardedIndex.load(idx_dir, ispec)
    log.info(
        "%s searcher over %d units (%s embeddings, %s index %s)",
        spec.name,
        index.ntotal,
        "new" if encoded else "cached",
        "new" if built else "cached",
        idx_dir,
    )
    searcher = DenseSearcher(DenseRetriever(spec), index, store.ids)
    searcher.info = {
        "embeddings_dir": str(emb_dir),
        "index_dir": str(idx_dir),
        "encoded": encoded,
        "index_built": built,
        **({"index_recall": index.info["recall"]} if "recall" in index.info else {}),
    }
    return searcher


def _load_or_build_bm25(
    units_path: Path, rcfg: dict[str, Any], cache_dir: str | Path
) -> BM25Searcher:
    settings = bm25_settings(rcfg)
    key = content_key(units=hash_file(units_path), bm25=settings)
    out = artifact_dir(cache_dir, "bm25", settings["name"], key=key)
    built = not (out / "manifest.json").exists()
    if built:
        BM25Searcher.build(units_path, settings).save(out, units_sha256=hash_file(units_path))
    searcher = BM25Searcher.load(out)
    searcher.info = {"index_dir": str(out), "index_built": built, "encoded": False}
    return searcher
