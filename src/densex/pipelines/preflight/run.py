"""Preflight: fail in seconds, with the fix named, before any heavy work.

Every entry point (`train.py`, `index.py`, `evaluate.py`) goes through `main(cfg, entry)`:
logging is set up once (`verbose=true` shows everything), then `preflight(cfg, entry)` checks

- every input's first records are read by the reader its stage calls (questions are all
  loaded: they are small and their count sizes the outputs): `preflight/inputs`;
- every model resolves: a local directory, the Hugging Face cache, or the hub when online.
  Offline and missing gives one short error naming the config key, the hub id and the
  override to use (`retriever.query_model=/local/dir`, `model.name_or_path=...`, `model=tiny`):
  `preflight/models`, `preflight/hub`;
- `ckpt_path=last` has a checkpoint to resume, a `ckpt_path` file exists
  (`train/checkpoints.resume_problem`);
- the estimated size of the run's outputs, against the free space where they go:
  `preflight/sizes`.

A `PreflightError` or `DataError` is printed as its message alone (no library traceback)
and the process exits with status 2; `HYDRA_FULL_ERROR=1` re-raises it with the traceback.
For a multirun, `GridPreflight` (the sweep callback, before the first job) runs
`preflight/grid.grid_preflight`: each distinct dataset and model of the grid checked once and
the grid's estimated disk use printed.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from densex.pipelines.preflight.grid import grid_preflight
from densex.pipelines.preflight.hub import PreflightError
from densex.pipelines.preflight.inputs import check_corpus, check_dataset, check_train_data
from densex.pipelines.preflight.models import check_retrieval_models, check_train_models
from densex.pipelines.preflight.sizes import (
    estimate_cell_bytes,
    estimate_train_bytes,
    free_bytes,
    human_bytes,
    warn_space,
)
from densex.pipelines.schemas import typed_groups
from densex.pipelines.train.checkpoints import resume_problem
from densex.utils.io import DataError
from densex.utils.logging import get_logger, setup_logging

log = get_logger(__name__)

ENTRIES = ("train", "index", "evaluate")


def main(cfg: DictConfig, entry: str) -> float | None:
    """Set up logging, run the preflight, then `densex.pipelines.<entry>.run.run(cfg)`.

    Bad input or configuration (a `PreflightError` or `DataError`, at preflight or later)
    ends the process with its message and status 2, unless HYDRA_FULL_ERROR=1.
    """
    setup_logging(bool(cfg.get("verbose", False)))
    try:
        preflight(cfg, entry)
        run: Callable[[DictConfig], Any] = importlib.import_module(
            f"densex.pipelines.{entry}.run"
        ).run
        return run(cfg)
    except (PreflightError, DataError) as e:
        fail(e)
    return None  # pragma: no cover - fail() exits


def fail(error: BaseException) -> None:
    """Report a configuration/input error as one message and exit 2 (raise with
    HYDRA_FULL_ERROR=1)."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise error
    kind = "preflight" if isinstance(error, PreflightError) else "bad input"
    log.error("%s: %s", kind, error)
    print(f"error ({kind}): {error}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def preflight(cfg: DictConfig, entry: str, announce: bool = True) -> dict[str, Any]:
    """Check inputs and models of one job and log its estimated output size (`announce`
    False: the `preflight ok` line left out, warnings kept); return what was found
    (`inputs`, `models`, `n_questions`, `estimate_bytes`). Raises `PreflightError`."""
    if entry not in ENTRIES:
        raise ValueError(f"entry must be one of {ENTRIES}, got {entry!r}")
    try:
        typed_groups(cfg)  # every typed group's values (allowed choices, required keys)
    except ValueError as e:
        raise PreflightError(str(e)) from e
    if cfg.get("preflight") is False or (entry == "index" and cfg.get("stage") == "plan"):
        return {}  # stage=plan reads no input and loads no model: nothing to check
    info: dict[str, Any] = {"inputs": {}, "models": {}}
    say = log.info if announce else log.debug  # the `preflight ok` line
    if entry == "train":
        if problem := resume_problem(cfg.get("ckpt_path"), cfg):
            raise PreflightError(problem)
        info["inputs"] = check_train_data(cfg.data)
        info["models"] = check_train_models(cfg.model)
    else:
        info["inputs"] = check_corpus(cfg, entry)
        info["models"] = check_retrieval_models(cfg, entry)
    if entry == "evaluate":
        questions = check_dataset(cfg.dataset, cfg.get("limit_questions"))
        info["n_questions"] = questions
        info["estimate_bytes"] = estimate_cell_bytes(cfg, questions)
        where = _output_dir(cfg)
        say(
            "preflight ok: %d questions; models %s; estimated outputs %s in %s (%s free)",
            questions,
            _models_text(info["models"]),
            human_bytes(info["estimate_bytes"]),
            where,
            human_bytes(free_bytes(where)),
        )
        warn_space(info["estimate_bytes"], where)
    elif entry == "train":
        info["estimate_bytes"] = estimate_train_bytes(cfg, info["models"])
        where = _output_dir(cfg)
        say(
            "preflight ok: models %s; estimated checkpoints + export %s in %s (%s free)",
            _models_text(info["models"]),
            human_bytes(info["estimate_bytes"]),
            where,
            human_bytes(free_bytes(where)),
        )
        warn_space(info["estimate_bytes"], where)
    else:
        cache = Path(str(cfg.paths.cache_dir))
        say(
            "preflight ok: models %s; artifacts go to %s (%s free)",
            _models_text(info["models"]),
            cache,
            human_bytes(free_bytes(cache)),
        )
    return info


class GridPreflight(Callback):
    """`hydra.callbacks.preflight` of `conf/evaluate.yaml`: `grid_preflight` before a
    multirun's first job; a failure ends the sweep at once with its message."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        setup_logging(bool(config.get("verbose", False)))
        try:
            grid_preflight(config)
        except (PreflightError, DataError) as e:
            fail(e)


def _output_dir(cfg: DictConfig) -> Path:
    try:
        return Path(str(cfg.paths.output_dir))
    except Exception:  # noqa: BLE001 - outside a Hydra job the interpolation does not resolve
        return Path(str(cfg.paths.get("log_dir", ".")))


def _models_text(models: Mapping[str, str]) -> str:
    return ", ".join(f"{k} ({v})" for k, v in models.items()) or "none"
