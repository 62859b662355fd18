"""Compose the project's Hydra configs outside an entry script (benchmarks, tests, notebooks).

`compose_config("evaluate", "retriever=minilm", ...)` gives what `evaluate.py retriever=minilm`
would see: the group schemas registered, `conf/<name>.yaml` with its defaults list and the
overrides, interpolations left as the entry leaves them. `group_config("retriever", "minilm")`
is one group option alone, composed onto its schema (with the `paths` it interpolates).
Loading a group's YAML file directly skips its `defaults: [schema, _self_]` and fails.
"""

from __future__ import annotations

import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from densex.pipelines.schemas import register_configs

PROJECT_ROOT = Path(__file__).resolve().parents[3]
CONF_DIR = PROJECT_ROOT / "conf"


def compose_config(name: str | None, *overrides: str, hydra: bool = False) -> DictConfig:
    """`conf/<name>.yaml` (None: no primary config) composed with `overrides`, as the entry
    script would; `hydra=True` keeps the `hydra` node (help, sweeper, launcher)."""
    os.environ.setdefault("PROJECT_ROOT", str(PROJECT_ROOT))
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose(name, overrides=list(overrides), return_hydra_config=hydra)


def group_config(group: str, name: str, *overrides: str) -> DictConfig:
    """One option of a config group (`conf/<group>/<name>.yaml` on its schema) with
    `overrides` (`"retriever.batch_size=32"`), composed with the `paths` it interpolates, as an
    entry script would see `cfg.<group>`."""
    return compose_config(None, f"+{group}={name}", "+paths=default", *overrides)[group]
