"""How faiss indexes are built and searched: `IndexSpec`, a `conf/index/*.yaml` node.

Build settings (factory string, shard count, training sample, memory budget) are part of an
index's cache key (`cache_fields`); search-time settings (`SEARCH_KEYS`: GPU use, batch size,
search parameters, recall measurement, BLAS threshold) are applied when an index is loaded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from densex.utils.config import from_config

__all__ = ["SEARCH_KEYS", "IndexSpec"]

# Search-time settings: applied when an index is loaded, never part of its build key.
SEARCH_KEYS = (
    "use_gpu",
    "search_batch_size",
    "params",
    "recall_queries",
    "recall_k",
    "blas_threshold",
)


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
    # CPU RAM an index may hold at once: a bigger index is cut into shards of at most this
    # size, written as they are built and searched memory-mapped, one shard at a time
    memory_budget_gb: float = 1.0
    # faiss's `distance_compute_blas_threshold` (null = the build's default): query batches of
    # at least this many go through BLAS, the rest through faiss's own SIMD loops. This
    # faiss-cpu build defaults to 128000 (never, in practice); 20 (faiss's classic value) made
    # exact search ~14x faster on a 2-core AVX-512 CPU, scores differing in the 5th decimal
    blas_threshold: int | None = None

    @classmethod
    def from_cfg(cls, cfg: Mapping[str, Any] | Any | None) -> IndexSpec:
        """From a `conf/index` node or dict (None = the defaults); unknown keys are an error."""
        if isinstance(cfg, IndexSpec):
            return cfg
        return from_config(cls, cfg, strict=True)

    @property
    def exact(self) -> bool:
        """Whether the factory is exact search (`Flat`)."""
        return self.factory.replace(" ", "") == "Flat"

    def cache_fields(self) -> dict[str, Any]:
        """What changes the stored index. GPU use, batch size and search parameters (nprobe,
        efSearch) are applied at load time, and the recall check only measures, so changing them
        reuses the index (the manifest's recall says which `params` it was measured with)."""
        d = dataclasses.asdict(self)
        for k in SEARCH_KEYS:
            d.pop(k)
        return d
