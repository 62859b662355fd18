"""This process's rank, the way Lightning reads it.

`global_rank()` is for code that runs before (or outside) a Trainer, e.g. a pipeline stage that
lets rank 0 build a shared artifact under `strategy=ddp`, where Lightning re-launches the whole
script once per device. An initialised `torch.distributed` process group answers first; then
the launcher's environment in Lightning's own order (`lightning_fabric.utilities.rank_zero.
_get_rank`): `RANK`, `LOCAL_RANK`, `SLURM_PROCID`, `JSM_NAMESPACE_RANK`. `LOCAL_RANK` comes
before `SLURM_PROCID` because `SLURM_PROCID` is set in every process of an `srun` job step
even when Lightning (not SLURM) starts the workers. Lightning's function is private, so the
order is restated here and `tests/test_distributed.py` checks it against Lightning's.
"""

from __future__ import annotations

import os

__all__ = ["RANK_ENV_VARS", "global_rank"]

RANK_ENV_VARS = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def global_rank() -> int:
    """The process group's rank when one is initialised, else the first of `RANK_ENV_VARS`
    that is set (an empty value counts as unset), else 0."""
    import torch.distributed as dist  # lazy: importing this module must not load torch (~2 s)

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    for var in RANK_ENV_VARS:
        value = os.environ.get(var)
        if value not in (None, ""):
            return int(value)
    return 0
