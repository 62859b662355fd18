"""Where a faiss index runs: GPU detection and placement, the GPU's top-k limit, parameters.

`want_gpu(index.use_gpu)` applies `auto | true | false` (true without a GPU is an error);
`set_search_params` sets nprobe / efSearch / ... on a CPU or GPU index; a faiss GPU index
refuses k above `GPU_MAX_K`, so larger searches use a CPU copy (`to_cpu`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import faiss

__all__ = ["GPU_MAX_K", "gpu_available", "is_gpu", "set_search_params", "to_cpu", "want_gpu"]

# faiss GPU indexes assert k <= GPU_MAX_SELECTION_K (2048); larger searches go to a CPU copy.
GPU_MAX_K = 2048


def set_search_params(index: faiss.Index, params: Mapping[str, float | int | str]) -> None:
    """Set search parameters (`{"nprobe": 8}`, ...) on `index`, a CPU or GPU one."""
    if not params:
        return
    ps = faiss.GpuParameterSpace() if is_gpu(index) else faiss.ParameterSpace()
    for key, value in params.items():
        ps.set_index_parameter(index, key, value)


def is_gpu(index: faiss.Index) -> bool:
    """Whether `index` is a faiss GPU index."""
    return "Gpu" in type(index).__name__


def to_cpu(index: faiss.Index) -> faiss.Index:
    """A CPU copy of the GPU index `index`."""
    return faiss.index_gpu_to_cpu(index)


def gpu_available() -> bool:
    """Whether this faiss build has GPU support and sees a GPU."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def want_gpu(use_gpu: Any) -> bool:
    """`index.use_gpu` applied: auto = a GPU if available; true without one is a RuntimeError."""
    if isinstance(use_gpu, str) and use_gpu.lower() == "auto":
        return gpu_available()
    if use_gpu in (True, "true", "True"):
        if not gpu_available():
            raise RuntimeError("index.use_gpu=true but this faiss build sees no GPU")
        return True
    return False
