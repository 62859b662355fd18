"""`RunIf`: run a test only where its hardware is (after lightning-hydra-template's helper).

    @RunIf(min_gpus=1, bf16=True)
    def test_auto_dtype_is_bf16_on_a_gpu(): ...

Returns a `pytest.mark.skipif` whose reason names every missing requirement, so a CPU run
reports "SKIPPED (Requires: [a GPU + ...])" and a GPU machine selects the test.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch


def _faiss_gpus() -> int:
    try:
        import faiss
    except ImportError:
        return 0
    return faiss.get_num_gpus() if hasattr(faiss, "StandardGpuResources") else 0


class RunIf:
    """A skipif mark from hardware requirements: `min_gpus` CUDA devices, `bf16` support,
    a `faiss_gpu` build that sees a GPU."""

    def __new__(
        cls, min_gpus: int = 0, bf16: bool = False, faiss_gpu: bool = False, **kwargs: Any
    ) -> pytest.MarkDecorator:
        conditions, reasons = [], []
        if min_gpus:
            conditions.append(torch.cuda.device_count() < min_gpus)
            reasons.append(f"GPUs>={min_gpus}")
        if bf16:
            ok = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
            conditions.append(not ok)
            reasons.append("a bf16 GPU")
        if faiss_gpu:
            conditions.append(_faiss_gpus() < 1)
            reasons.append("faiss with a GPU")
        return pytest.mark.skipif(
            any(conditions), reason=f"Requires: [{' + '.join(reasons)}]", **kwargs
        )
