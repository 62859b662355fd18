"""Retrievers, sharded encoding, faiss/BM25 indexes and cached searchers.

Names are imported lazily so `densex.retrieval.search` (pure numpy) does not pull in torch,
Lightning, faiss and bm25s.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RetrieverSpec": "spec",
    "TextEncoder": "encoders",
    "DenseRetriever": "encoders",
    "build_retriever": "encoders",
    "load_encoder": "encoders",
    "HashEncoder": "hashing",
    "EmbeddingStore": "embedding_store",
    "EmbeddingShardWriter": "encode_lightning",
    "encode_units_to_dir": "encode",
    "IndexSpec": "spec",
    "ShardedIndex": "sharded_index",
    "build_index": "faiss_index",
    "measure_recall": "faiss_index",
    "BM25Searcher": "bm25",
    "BM25Spec": "spec",
    "UnitSearcher": "search",
    "DenseSearcher": "build",
    "load_or_build_searcher": "build",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'densex.retrieval' has no attribute {name!r}")
    return getattr(importlib.import_module(f"densex.retrieval.{_EXPORTS[name]}"), name)
