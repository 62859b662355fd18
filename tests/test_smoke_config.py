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
