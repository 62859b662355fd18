"""The failed cells of a SLURM sweep, as `hydra_plugins.densex_slurm.launcher.SlurmLauncher` records
them in `<sweep dir>/failed_cells.jsonl` (one row per cell: `cell` number, `slurm_job_id`, the
cell's `overrides`, its `log` file, its `run_dir` and the `error`: the entry's located
`error (...): FILE:LINE: ...` line from the log, else the exception's first line). Kept apart
from the launcher so that readers (the sweep tables) need no hydra-submitit-launcher.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from densex.utils.io import read_jsonl

__all__ = ["FAILED_CELLS", "read_failed_cells"]

FAILED_CELLS = "failed_cells.jsonl"


def read_failed_cells(sweep_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The failed cells the launcher recorded in `sweep_dir` (none when the file is absent)."""
    path = Path(sweep_dir) / FAILED_CELLS
    return list(read_jsonl(path)) if path.exists() else []
