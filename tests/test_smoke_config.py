"""The three entry configs compose with their defaults (as lightning-hydra-template tests do)."""

from __future__ import annotations

import pytest

from helpers.config import compose_config


@pytest.mark.parametrize("name", ["index", "evaluate", "train"])
def test_entry_configs_compose(repo_root, name):
    cfg = compose_config(name, hydra=True)
    assert cfg.task_name == name
    assert cfg.paths.cache_dir


@pytest.mark.parametrize(
    ("launcher", "key", "value"),
    [("slurm", "gpus_per_node", 1), ("local_parallel", "n_jobs", 2)],
)
def test_cluster_launchers_compose(repo_root, launcher, key, value):
    """Sweeps go to SLURM (submitit) or local processes (joblib) by one override."""
    cfg = compose_config("evaluate", f"hydra/launcher={launcher}", hydra=True)
    assert cfg.hydra.launcher[key] == value
    assert "Launcher" in cfg.hydra.launcher._target_
