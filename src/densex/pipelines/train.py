"""Fine-tune a propositionizer: `python train.py model=flan-t5-large` (lightning-hydra-template flow).

seed -> datamodule -> model (a tiny T5 is built on the training texts for `model=tiny`) ->
callbacks, loggers, trainer (effective batch 64 = per-device batch x devices x gradient accumulation) -> optional
baseline validation -> fit (resumable) -> best checkpoint exported with `save_pretrained`
to `<run dir>/hf_model`. Returns the best validation set-F1, for Hydra sweepers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import ModelCheckpoint

from densex.propositionizer.module import prepare_model_path
from densex.report.wandb_log import wandb_offline
from densex.utils.io import write_json
from densex.utils.logging import get_logger
from densex.utils.models import resolve_precision
from densex.utils.progress import LogProgress, is_tty
from densex.utils.resume import RNGState, newest_checkpoint
from densex.utils.secrets import redact_config
from densex.utils.trainer import CloseSpawnedProcessGroup, multirun_safe_strategy

log = get_logger(__name__)

MONITOR = "val/set_f1"


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
    import os

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


def best_checkpoint(
    trainer: Any, monitor: str = MONITOR
) -> tuple[str, float | None, dict[str, Any] | None]:
    """(path, score, loaded checkpoint) of the best checkpoint by `monitor`, from the
    `ModelCheckpoint` that monitors it (not just `trainer.checkpoint_callback`).

    The score is read from the checkpoint file itself (the callback's state saved in it):
    under `ddp_spawn` the launcher process gets back only the first checkpoint callback's
    `best_model_path`, never `best_model_score`. ("", None, None) without such a checkpoint.
    """
    cbs = [c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint)]
    cb = next((c for c in cbs if c.monitor == monitor), None)
    if cb is None:
        return "", None, None

    def load(path: str) -> dict[str, Any]:
        return torch.load(path, map_location="cpu", weights_only=True)

    path = cb.best_model_path
    if not path:  # ddp_spawn: find it in the state saved with another callback's checkpoint
        for other in cbs:
            for p in {other.best_model_path, other.last_model_path} - {""}:
                if Path(p).exists():
                    state = _callback_state(load(p), cb, monitor) or {}
                    path = state.get("best_model_path") or ""
                if path:
                    break
            if path:
                break
    if not path or not Path(path).exists():
        return "", None, None
    ckpt = load(path)
    state = _callback_state(ckpt, cb, monitor) or {}
    score = state.get("best_model_score")
    if score is None:
        score = cb.best_model_score
    return path, (float(score) if score is not None else None), ckpt


def _callback_state(ckpt: dict[str, Any], cb: Any, monitor: str) -> dict[str, Any] | None:
    """The state `cb` saved in `ckpt` (by its state key, else the one monitoring `monitor`)."""
    states = ckpt.get("callbacks") or {}
    if cb.state_key in states:
        return states[cb.state_key]
    return next(
        (s for s in states.values() if isinstance(s, dict) and s.get("monitor") == monitor), None
    )


def checkpoint_dir(cfg: DictConfig) -> Path:
    """Where this run's resume checkpoints go (`callbacks.last_checkpoint.dirpath`)."""
    cb = (cfg.get("callbacks") or {}).get("last_checkpoint") or {}
    return Path(cb.get("dirpath") or Path(cfg.paths.output_dir) / "checkpoints")


def _resolve_ckpt(ckpt_path: str | None, cfg: DictConfig) -> str | None:
    """`last`: the newest checkpoint of this run dir (mid-epoch step checkpoints included),
    an error saying there is none otherwise; `auto`: the same, or a clean start when there is
    none (a requeued cluster job); a path must exist."""

    if not ckpt_path:
        return None
    if ckpt_path in ("last", "auto"):
        ckpt_dir = checkpoint_dir(cfg)
        newest = newest_checkpoint(ckpt_dir)
        if newest is None:
            if ckpt_path == "auto":
                log.info("ckpt_path=auto: no checkpoint in %s, starting from scratch", ckpt_dir)
                return None
            raise FileNotFoundError(
                f"ckpt_path=last: there is no checkpoint in {ckpt_dir} (nothing to resume); "
                "start fresh with ckpt_path=null, or use ckpt_path=auto to resume when there is one"
            )
        log.info("resuming from the newest checkpoint %s", newest)
        return str(newest)
    if not Path(ckpt_path).exists():
        raise FileNotFoundError(f"ckpt_path not found: {ckpt_path}")
    return ckpt_path


def _resolve_ckpt_or_none(cfg: DictConfig) -> str | None:
    """This run dir's newest checkpoint, if training wrote one."""
    return _resolve_ckpt("auto", cfg)


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
    """The `data` group's data module with its pairs loaded (validation pairs required)."""
    datamodule = instantiate(cfg.data, per_device_batch_size=per_device)
    datamodule.load_pairs()
    if not datamodule.val_pairs:
        raise ValueError(
            "no validation pairs: set data.val_fraction > 0, data.val_path or data.val_split"
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


def best_score(trainer: pl.Trainer, monitor: str) -> tuple[str, float, dict[str, Any] | None]:
    """(best checkpoint path, best `monitor` value, the loaded checkpoint on rank 0): from the
    checkpoint file on rank 0 (ddp_spawn-safe), the callback elsewhere, else the last value."""
    best_path, best, best_ckpt = "", None, None
    if trainer.is_global_zero:
        best_path, best, best_ckpt = best_checkpoint(trainer, monitor)
    else:
        cb = next((c for c in trainer.checkpoint_callbacks if c.monitor == monitor), None)
        best = cb.best_model_score if cb is not None else None
    if best is None:
        log.warning("no best %s checkpoint score: reporting the last validation's", monitor)
        best = trainer.callback_metrics.get(monitor)
    return best_path, (float(best) if best is not None else float("nan")), best_ckpt


def load_best_weights(module: Any, best_ckpt: dict[str, Any] | None) -> dict[str, Any]:
    """Load the best checkpoint's weights into `module`; its epoch and step for the summary."""
    if best_ckpt is None:
        return {}
    module.load_state_dict(best_ckpt["state_dict"])
    return {"best_epoch": best_ckpt["epoch"], "best_global_step": best_ckpt["global_step"]}


def export_model(
    cfg: DictConfig, trainer: pl.Trainer, module: Any, summary: dict[str, Any]
) -> Path:
    """Rank 0: `save_pretrained` the module to `<run dir>/hf_model` and write
    `train_summary.json` (with the epochs and steps trained); return the export directory."""
    out_dir = Path(cfg.paths.output_dir)
    epochs, step = trainer.current_epoch, trainer.global_step
    last = _resolve_ckpt_or_none(cfg)
    if last and step == 0:  # ddp_spawn: the launcher process does not see the loop state
        ckpt = torch.load(last, map_location="cpu", weights_only=True)
        epochs, step = ckpt["epoch"] + 1, ckpt["global_step"]
    head = {k: summary.pop(k) for k in ("best_val_set_f1", "best_checkpoint")}
    summary = {**head, "epochs": epochs, "global_step": step, **summary}
    config = redact_config(OmegaConf.to_container(cfg, resolve=True))
    export = module.export_hf(out_dir / "hf_model", config=config, **summary)
    write_json(out_dir / "train_summary.json", {**summary, "hf_model": str(export)})
    log.info("best val/set_f1 %.4f; exported %s", summary["best_val_set_f1"], export)
    return export


def run(cfg: DictConfig) -> float:
    """Train, validate by set-F1, export; return the best `optimized_metric` (val/set_f1)."""
    if cfg.get("seed") is not None:
        pl.seed_everything(cfg.seed, workers=True)
    if torch.cuda.is_available():
        torch.set_float32_matmul_precision("high")
    trainer = build_trainer(cfg)
    devices = trainer.world_size  # Lightning's own count: devices x nodes
    per_device, accumulate = batch_plan(
        cfg.model.batch_size, cfg.model.per_device_batch_size, devices
    )
    trainer.accumulate_grad_batches = accumulate
    log.info(
        "effective batch %d = %d per device x %d devices x %d accumulation steps",
        *(per_device * devices * accumulate, per_device, devices, accumulate),
    )
    datamodule = build_datamodule(cfg, per_device)
    model_path = build_model_path(cfg, datamodule)
    module = instantiate(
        cfg.model,
        name_or_path=model_path,
        per_device_batch_size=per_device,
        warm_start=None,  # already built above
        _convert_="all",
    )
    datamodule.set_tokenizer(module.tokenizer)
    datamodule.setup("fit")
    plan = {
        "model_path": model_path,
        "accumulate_grad_batches": accumulate,
        "per_device_batch_size": per_device,
        "effective_batch_size": per_device * devices * accumulate,
        "data_stats": datamodule.stats,
    }
    # loggers get the whole config, without secrets
    hparams = {"cfg": redact_config(OmegaConf.to_container(cfg, resolve=True)), **plan}
    for lg in trainer.loggers:
        lg.log_hyperparams(hparams)

    if cfg.get("validate_first"):
        trainer.validate(module, datamodule=datamodule)
    ckpt_path = _resolve_ckpt(cfg.get("ckpt_path"), cfg)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)

    best_path, best, best_ckpt = best_score(trainer, cfg.get("optimized_metric") or MONITOR)
    if trainer.is_global_zero:
        summary = {"best_val_set_f1": best, "best_checkpoint": best_path or None, **plan}
        summary |= load_best_weights(module, best_ckpt)
        del best_ckpt  # the checkpoint (optimizer states included) before the export
        export_model(cfg, trainer, module, summary)
    return best
