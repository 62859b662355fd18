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

from densex.pipelines.train.checkpoints import MONITOR, best_score, load_best_weights, resolve_ckpt
from densex.pipelines.train.setup import (
    batch_plan,
    build_datamodule,
    build_model_path,
    build_trainer,
)
from densex.utils.io import write_json
from densex.utils.logging import get_logger
from densex.utils.secrets import redact_config

log = get_logger(__name__)


def run(cfg: DictConfig) -> float:
    """Train, validate by set-F1, export; return the best `optimized_metric` (val/set_f1)."""
    if cfg.get("seed") is not None:
        pl.seed_everything(cfg.seed, workers=True)
    if torch.cuda.is_available():
        torch.set_float32_matmul_precision("high")
    trainer = build_trainer(cfg)
    per_device, accumulate = plan_batches(cfg, trainer)
    datamodule = build_datamodule(cfg, per_device)
    model_path = build_model_path(cfg, datamodule)
    module = build_module(cfg, model_path, per_device, datamodule)
    plan = {
        "model_path": model_path,
        "accumulate_grad_batches": accumulate,
        "per_device_batch_size": per_device,
        "effective_batch_size": per_device * trainer.world_size * accumulate,
        "data_stats": datamodule.stats,
    }
    log_hyperparams(cfg, trainer, plan)

    if cfg.get("validate_first"):
        trainer.validate(module, datamodule=datamodule)
    ckpt_path = resolve_ckpt(cfg.get("ckpt_path"), cfg)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)

    monitor = cfg.get("optimized_metric") or MONITOR
    best_path, best, best_ckpt = best_score(trainer, monitor)
    if trainer.is_global_zero:
        # best_val_set_f1: the monitored metric's best value, under its historical name
        summary = {"best_val_set_f1": best, "best_checkpoint": best_path or None, **plan}
        summary["monitor"] = monitor
        summary |= load_best_weights(module, best_ckpt)
        del best_ckpt  # the checkpoint (optimizer states included) before the export
        export_model(cfg, trainer, module, summary)
    return best


def plan_batches(cfg: DictConfig, trainer: pl.Trainer) -> tuple[int, int]:
    """(per-device batch, accumulation steps) of `model.batch_size` on the trainer's devices
    (`batch_plan`); sets the trainer's gradient accumulation and logs the effective batch."""
    devices = trainer.world_size  # Lightning's own count: devices x nodes
    per_device, accumulate = batch_plan(
        cfg.model.batch_size, cfg.model.per_device_batch_size, devices
    )
    trainer.accumulate_grad_batches = accumulate
    log.info(
        "effective batch %d = %d per device x %d devices x %d accumulation steps",
        *(per_device * devices * accumulate, per_device, devices, accumulate),
    )
    return per_device, accumulate


def build_module(cfg: DictConfig, model_path: str, per_device: int, datamodule: Any) -> Any:
    """The `model` group's LightningModule on `model_path`; the data module gets its tokenizer
    and is set up for fitting."""
    module = instantiate(
        cfg.model,
        name_or_path=model_path,
        per_device_batch_size=per_device,
        warm_start=None,  # already built above
        _convert_="all",
    )
    datamodule.set_tokenizer(module.tokenizer)
    datamodule.setup("fit")
    return module


def log_hyperparams(cfg: DictConfig, trainer: pl.Trainer, plan: dict[str, Any]) -> None:
    """Give every logger the whole config (without secrets) and the run's batch/data plan."""
    hparams = {"cfg": redact_config(OmegaConf.to_container(cfg, resolve=True)), **plan}
    for lg in trainer.loggers:
        lg.log_hyperparams(hparams)


def export_model(
    cfg: DictConfig, trainer: pl.Trainer, module: Any, summary: dict[str, Any]
) -> Path:
    """Rank 0: `save_pretrained` the module to `<run dir>/hf_model` and write
    `train_summary.json` (with the epochs and steps trained); return the export directory."""
    out_dir = Path(cfg.paths.output_dir)
    epochs, step = trainer.current_epoch, trainer.global_step
    last = resolve_ckpt("auto", cfg)  # this run dir's newest checkpoint, if any
    if last and step == 0:  # ddp_spawn: the launcher process does not see the loop state
        ckpt = torch.load(last, map_location="cpu", weights_only=True)
        epochs, step = ckpt["epoch"] + 1, ckpt["global_step"]
    head = {k: summary.pop(k) for k in ("best_val_set_f1", "best_checkpoint")}
    summary = {**head, "epochs": epochs, "global_step": step, **summary}
    config = redact_config(OmegaConf.to_container(cfg, resolve=True))
    export = module.export_hf(out_dir / "hf_model", config=config, **summary)
    write_json(out_dir / "train_summary.json", {**summary, "hf_model": str(export)})
    name = summary.get("monitor", MONITOR)
    log.info("best %s %.4f; exported %s", name, summary["best_val_set_f1"], export)
    return export
