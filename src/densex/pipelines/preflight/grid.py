"""The preflight of a whole multirun grid, before its first job (`preflight.GridPreflight`).

Contract: `grid_overrides(config)` expands the sweep into each job's override list, as Hydra's
basic sweeper does; `grid_preflight(config)` checks each distinct dataset, corpus and model
of the grid once (composing one config per distinct combination), logs the grid's estimated
disk use and returns `{cells, estimate_bytes}`; a failing check raises `PreflightError`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from densex.pipelines.preflight.inputs import check_corpus, check_dataset
from densex.pipelines.preflight.models import check_retrieval_models
from densex.pipelines.preflight.sizes import (
    estimate_cell_bytes,
    free_bytes,
    human_bytes,
    warn_space,
)
from densex.utils.logging import get_logger

log = get_logger("densex.pipelines.preflight.run")  # the preflight's log lines keep its name

# config keys whose value changes neither the inputs read nor the size of a cell's outputs
SIZE_NEUTRAL = ("retriever", "granularity", "index", "budget", "seed", "logger", "trainer")
# ... and those that change neither the corpus nor the models a cell needs
INPUT_NEUTRAL = ("dataset", "index", "budget", "seed", "logger", "trainer", "topk")


def grid_overrides(config: DictConfig) -> list[list[str]]:
    """The override list of every job a multirun will launch: the sweeper's `params` and
    the command line's sweeps (`a=x,y`), as Hydra's basic sweeper expands them."""
    params = config.hydra.sweeper.get("params") or {}
    args = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    parsed = OverridesParser.create().parse_overrides(args)
    values: dict[str, list[str]] = {}
    for o in parsed:
        key = o.get_key_element()
        if o.is_sweep_override():
            values[key] = [f"{key}={v}" for v in o.sweep_string_iterator()]
        else:
            values[key] = [f"{key}={o.get_value_element_as_str()}"]
    return [list(combo) for combo in itertools.product(*values.values())]


def _compose(config: DictConfig, overrides: Sequence[str]) -> DictConfig:
    loader = GlobalHydra.instance().config_loader()
    return loader.load_sweep_config(config, list(overrides))


def _project(overrides: Iterable[str], drop: Sequence[str]) -> tuple[str, ...]:
    return tuple(o for o in overrides if o.lstrip("+~").split("=", 1)[0] not in drop)


def grid_bytes(config: DictConfig, cells: list[list[str]]) -> int:
    """The grid's estimated output bytes: one question count and estimate per distinct
    combination of the size-relevant overrides, times the cells sharing it."""
    by_size: dict[tuple[str, ...], int] = {}
    for ov in cells:
        key = _project(ov, SIZE_NEUTRAL)
        by_size[key] = by_size.get(key, 0) + 1
    total = 0
    for key, count in by_size.items():
        cfg = _compose(config, list(key))
        n = check_dataset(cfg.dataset, cfg.get("limit_questions"))
        total += count * estimate_cell_bytes(cfg, n)
    return total


def grid_preflight(config: DictConfig) -> dict[str, Any]:
    """Before a multirun's first job: check each distinct dataset/corpus and model of the
    grid once, and log the grid's estimated disk use. Returns `{cells, estimate_bytes}`."""
    if config.get("preflight") is False or str(config.get("task_name")) == "train":
        return {}
    cells = grid_overrides(config)
    total = grid_bytes(config, cells)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    log.info(
        "preflight: %d cells; estimated outputs %s (%s per cell on average) in %s (%s free)",
        len(cells),
        human_bytes(total),
        human_bytes(total / max(len(cells), 1)),
        sweep_dir,
        human_bytes(free_bytes(sweep_dir)),
    )
    warn_space(total, sweep_dir)
    seen: set[tuple[str, ...]] = set()
    for ov in cells:
        key = _project(ov, INPUT_NEUTRAL)
        if key in seen:
            continue
        seen.add(key)
        cfg = _compose(config, list(key))
        check_corpus(cfg, "evaluate")
        check_retrieval_models(cfg, "evaluate")
    log.info("preflight ok: the grid's datasets, corpora and models")
    return {"cells": len(cells), "estimate_bytes": total}
