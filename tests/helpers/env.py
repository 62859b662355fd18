"""The environment of the entry scripts tests run as subprocesses: offline, quiet, one thread."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def subprocess_env(**extra: str) -> dict[str, str]:
    """`os.environ` with the hub and W&B offline, one BLAS thread, this checkout's `src` and
    root first; `extra` adds or overrides variables."""
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "PROJECT_ROOT": str(REPO),
        "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
        **extra,
    }
