"""The three entry configs compose with their defaults (as lightning-hydra-template tests do)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra


@pytest.mark.parametrize("name", ["index", "evaluate", "train"])
def test_entry_configs_compose(repo_root, name):
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(repo_root / "conf")):
        cfg = compose(config_name=name, return_hydra_config=True)
    assert cfg.task_name == name
    assert cfg.paths.cache_dir


@pytest.mark.parametrize(
    ("launcher", "key", "value"),
    [("slurm", "gpus_per_node", 1), ("local_parallel", "n_jobs", 2)],
)
def test_cluster_launchers_compose(repo_root, launcher, key, value):
    """Sweeps go to SLURM (submitit) or local processes (joblib) by one override."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(repo_root / "conf")):
        cfg = compose(
            config_name="evaluate",
            overrides=[f"hydra/launcher={launcher}"],
            return_hydra_config=True,
        )
    assert cfg.hydra.launcher[key] == value
    assert "Launcher" in cfg.hydra.launcher._target_
