"""Compose the project's Hydra configs in tests (the `cfg_train` / `cfg_eval` fixtures)."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from densex.pipelines.schemas import register_configs

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

# the group schemas, as the entry scripts register them; conftest imports this module, so
# every test that composes a config (through here or not) finds them
register_configs()


def compose_config(name: str | None, *overrides: str, hydra: bool = False) -> DictConfig:
    """`conf/<name>.yaml` (None: no primary config) composed with `overrides`, as the entry
    script would; `hydra=True` keeps the `hydra` node (help, sweeper, launcher)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose(name, overrides=list(overrides), return_hydra_config=hydra)


def group_config(group: str, name: str) -> DictConfig:
    """One option of a config group (`conf/<group>/<name>.yaml` on its schema), composed with
    the `paths` it interpolates, as an entry script would see `cfg.<group>`."""
    return compose_config(None, f"+{group}={name}", "+paths=default")[group]
