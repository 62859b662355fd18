"""Building a fine-tuning run from the config: the Trainer with its callbacks and loggers,
the data module, the model checkpoint to start from, and the batch plan.

Contract: `batch_plan` splits `model.batch_size` exactly into per-device batch x devices x
accumulation steps (else a `ValueError` naming the fix); `build_trainer`, `build_loggers`,
`build_datamodule` and `build_model_path` instantiate the `trainer`, `callbacks`, `logger`,
`data` and `model` groups (template style, `hydra.utils.instantiate`; `data.sources` typed
by `sources.pair_sources`).
"""

from __future__ import annotations

import os
from typing import Any

import pytorch_lightning as pl
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from densex.pipelines.train.sources import pair_sources
from densex.propositionizer.module import prepare_model_path
from densex.report.wandb_log import wandb_offline
from densex.utils.logging import get_logger
from densex.utils.models import resolve_precision
from densex.utils.progress import is_tty
from densex.utils.progress_lightning import LogProgress
from densex.utils.resume import RNGState
from densex.utils.trainer import CloseSpawnedProcessGroup, multirun_safe_strategy

log = get_logger("densex.pipelines.train.run")  # the stage's log lines keep its name


def batch_plan(batch_size: int, per_device_batch_size: int | None, devices: int) -> tuple[int, int]:
    """(per-device batch, accumulation steps) whose product with `devices` is `batch_size`.

    The per-device batch is `per_device_batch_size` capped at `batch_size // devices` (so
    several devices never overshoot the effective batch), the accumulation steps make up the
    rest. A `batch_size` that cannot be split exactly is an error naming the fix.
    """
    if batch_size < 1 or devices < 1:
        raise ValueError(f"batch_size ({batch_size}) and devices ({devices}) must be positive")
    per_device = min(per_device_batch_size or batch_size, batch_size // devices)
    if per_device < 1:
        raise ValueError(
            f"model.batch_size={batch_size} is smaller than the number of devices ({devices})"
        )
    accumulate = batch_size // (per_device * devices)
    if per_device * devices * accumulate != batch_size:
        raise ValueError(
            f"model.batch_size={batch_size} is not {per_device} per device x {devices} devices x"
            f" {accumulate} accumulation steps (= {per_device * devices * accumulate}); choose a"
            " model.per_device_batch_size that divides batch_size / devices"
        )
    return per_device, accumulate


def accumulation(batch_size: int, per_device_batch_size: int | None, devices: int) -> int:
    """Gradient accumulation steps of `batch_plan`: per-device batch x devices x steps ==
    batch_size."""
    return batch_plan(batch_size, per_device_batch_size, devices)[1]


def build_loggers(cfg: DictConfig) -> list[Any]:
    """The `logger` group's loggers. A W&B logger runs offline unless someone is logged in
    (or the config says `offline: true`), so `logger=wandb` never needs an account; an
    explicit WANDB_MODE is left for W&B itself to apply."""
    loggers = []
    for node in (cfg.get("logger") or {}).values():
        if not (isinstance(node, DictConfig) and "_target_" in node):
            continue
        if not str(node._target_).endswith("WandbLogger"):
            loggers.append(instantiate(node))
            continue
        mode = os.environ.get("WANDB_MODE")
        mode = "offline" if mode == "dryrun" else mode
        offline = mode == "offline" if mode else wandb_offline(node.get("offline"))
        # the mode goes to wandb.init explicitly: W&B reads WANDB_MODE only once per process
        # (so Lightning's offline switch, setting it late, can come too late)
        extra: dict[str, Any] = {"offline": offline, "mode": "offline" if offline else mode}
        if offline and node.get("log_model"):
            log.warning("W&B runs offline: logger.wandb.log_model ignored (no uploads offline)")
            extra["log_model"] = False
        if offline:
            log.info("W&B logger offline (not logged in, or asked to be)")
        loggers.append(instantiate(node, **extra))
    return loggers


def _instantiate_all(group: DictConfig | None) -> list[Any]:
    """Instantiate every `_target_` entry of a callbacks/logger group (template style)."""
    if not group:
        return []
    return [instantiate(c) for c in group.values() if isinstance(c, DictConfig) and "_target_" in c]


def build_trainer(cfg: DictConfig) -> pl.Trainer:
    """The `trainer` group's Trainer with the `callbacks` and `logger` groups, resume state
    (`RNGState`) and, without a terminal, periodic log lines instead of the progress bar."""
    # a spawned worker must close its process group or it may abort at exit (see the callback)
    # RNGState: generator states in every checkpoint, so a resumed run continues bit for bit
    callbacks = [
        *_instantiate_all(cfg.get("callbacks")),
        CloseSpawnedProcessGroup(),
        RNGState(cfg.get("seed")),
    ]
    show_bar = bool(cfg.trainer.get("enable_progress_bar", True)) and is_tty()
    if cfg.trainer.get("enable_progress_bar", True) and not show_bar:
        callbacks.append(LogProgress())
    loggers = build_loggers(cfg)
    if not loggers:  # logger=none: a learning-rate monitor has nowhere to log (Lightning raises)
        callbacks = [c for c in callbacks if not isinstance(c, pl.callbacks.LearningRateMonitor)]
    return instantiate(
        cfg.trainer,
        callbacks=callbacks,
        logger=loggers or False,
        # the data module shards batches across ranks itself (length-grouped per rank)
        use_distributed_sampler=False,
        enable_progress_bar=show_bar,
        precision=resolve_precision(cfg.trainer.get("precision", "auto")),
        strategy=multirun_safe_strategy(
            cfg.trainer.get("strategy", "auto"),
            cfg.trainer.get("devices", 1),
            cfg.trainer.get("num_nodes", 1),
        ),
    )


def build_datamodule(cfg: DictConfig, per_device: int) -> Any:
    """The `data` group's data module with its pairs loaded (validation pairs required);
    `data.sources` reaches it as `PairSource`s."""
    sources = pair_sources(cfg.data.get("sources"))
    datamodule = instantiate(
        cfg.data, per_device_batch_size=per_device, sources=sources, _convert_="object"
    )
    datamodule.load_pairs()
    if not datamodule.val_pairs:
        raise ValueError(
            "no validation pairs: set data.val_fraction > 0 (a source's, with data.sources),"
            " data.val_path or data.val_split"
        )
    return datamodule


def build_model_path(cfg: DictConfig, datamodule: Any) -> str:
    """The checkpoint to fine-tune: a warm start built from `model.warm_start`, a tiny T5 built
    on the training texts (`name_or_path: tiny`), or `name_or_path` itself."""
    if cfg.model.get("warm_start"):  # e.g. a bert2bert built from an encoder checkpoint
        return instantiate(cfg.model.warm_start, cache_dir=cfg.paths.cache_dir)
    name = cfg.model.name_or_path
    texts = datamodule.texts() if name == "tiny" else ()
    tiny = OmegaConf.to_container(cfg.model.tiny) if cfg.model.get("tiny") else None
    return prepare_model_path(name, texts, cfg.paths.cache_dir, tiny=tiny)
