"""`densex.utils.distributed.global_rank` reads ranks in Lightning's order."""

from __future__ import annotations

import pytest
from lightning_fabric.utilities.rank_zero import _get_rank

from densex.utils.distributed import RANK_ENV_VARS, global_rank

CASES = [
    ({}, 0),
    ({"RANK": "3"}, 3),
    ({"LOCAL_RANK": "1"}, 1),
    ({"SLURM_PROCID": "5"}, 5),
    ({"JSM_NAMESPACE_RANK": "2"}, 2),
    # srun + Lightning-launched workers: SLURM_PROCID is the job step's, LOCAL_RANK the worker's
    ({"SLURM_PROCID": "0", "LOCAL_RANK": "1"}, 1),
    ({"SLURM_PROCID": "4", "LOCAL_RANK": "0"}, 0),
    ({"RANK": "2", "LOCAL_RANK": "0", "SLURM_PROCID": "7"}, 2),
    ({"LOCAL_RANK": "", "SLURM_PROCID": "6"}, 6),  # empty counts as unset
]


@pytest.mark.parametrize(("env", "rank"), CASES)
def test_global_rank_follows_lightnings_order(monkeypatch, env, rank):
    for var in RANK_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert global_rank() == rank
    if "" not in env.values():  # Lightning's own reader agrees (it would fail on "")
        assert (_get_rank() or 0) == rank
