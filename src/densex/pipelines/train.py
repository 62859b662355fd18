"""Fine-tune a propositionizer: `python train.py model=flan-t5-large` (lightning-hydra-template flow).

seed -> datamodule -> model (a tiny T5 is built on the training texts for `model=tiny`) ->
callbacks, loggers, trainer (effective batch 64 via gradient accumulation) -> optional
baseline validation -> fit (resumable) -> best checkpoint exported with `save_pretrained`
to `<run dir>/hf_model`. Returns the best validation set-F1, for Hydra sweepers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from densex.utils.io import write_json
from densex.utils.logging import get_logger
from densex.utils.models import resolve_precision

log = get_logger(__name__)


def world_size(trainer_cfg: DictConfig | dict) -> int:
    """Number of training processes the trainer config asks for (devices x nodes)."""
    devices = trainer_cfg.get("devices", 1)
    if isinstance(devices, str) and devices.isdigit():
        devices = int(devices)
    if isinstance(devices, int) and devices > 0:
        n = devices
    elif isinstance(devices, (list, tuple)) or OmegaConf.is_list(devices):
        n = len(devices)
    elif trainer_cfg.get("accelerator") == "cpu":
        n = 1
    else:  # "auto" / -1: every visible GPU
        import torch

        n = max(1, torch.cuda.device_count())
    return n * int(trainer_cfg.get("num_nodes", 1) or 1)


def accumulation(batch_size: int, per_device_batch_size: int | None, devices: int) -> int:
    """Gradient accumulation steps so that per-device batch x devices x steps >= batch_size."""
    if not per_device_batch_size or per_device_batch_size >= batch_size:
        return 1
    return max(1, math.ceil(batch_size / (per_device_batch_size * devices)))


def _resolve_ckpt(ckpt_path: str | None, cfg: DictConfig) -> str | None:
    """`last` means this run dir's `checkpoints/last.ckpt`; a missing file is an error, not a
    silent fresh start."""
    if not ckpt_path:
        return None
    if ckpt_path == "last":
        cb = (cfg.get("callbacks") or {}).get("last_checkpoint") or {}
        ckpt_dir = cb.get("dirpath") or str(Path(cfg.paths.output_dir) / "checkpoints")
        ckpt_path = str(Path(ckpt_dir) / "last.ckpt")
    if not Path(ckpt_path).exists():
        raise FileNotFoundError(f"ckpt_path not found: {ckpt_path}")
    return ckpt_path


def _resolve_ckpt_or_none(cfg: DictConfig) -> str | None:
    """This run dir's last.ckpt, if training wrote one."""
    try:
        return _resolve_ckpt("last", cfg)
    except FileNotFoundError:
        return None


def _instantiate_all(group: DictConfig | None) -> list[Any]:
    """Instantiate every `_target_` entry of a callbacks/logger group (template style)."""
    from hydra.utils import instantiate

    if not group:
        return []
    return [instantiate(c) for c in group.values() if isinstance(c, DictConfig) and "_target_" in c]


def run(cfg: DictConfig) -> float:
    """Train, validate by set-F1, export; return the best validation set-F1."""
    import pytorch_lightning as pl
    import torch
    from hydra.utils import instantiate

    from densex.propositionizer.module import prepare_model_path

    if cfg.get("seed") is not None:
        pl.seed_everything(cfg.seed, workers=True)
    out_dir = Path(cfg.paths.output_dir)

    datamodule = instantiate(cfg.data)
    datamodule.load_pairs()
    if not datamodule.val_pairs:
        raise ValueError(
            "no validation pairs: set data.val_fraction > 0, data.val_path or data.val_split"
        )
    name = cfg.model.name_or_path
    texts = datamodule.texts() if name == "tiny" else ()
    tiny = OmegaConf.to_container(cfg.model.tiny) if cfg.model.get("tiny") else None
    model_path = prepare_model_path(name, texts, cfg.paths.cache_dir, tiny=tiny)
    module = instantiate(cfg.model, name_or_path=model_path, _convert_="all")
    datamodule.set_tokenizer(module.tokenizer)
    datamodule.setup("fit")

    devices = world_size(cfg.trainer)
    accumulate = accumulation(cfg.model.batch_size, cfg.model.per_device_batch_size, devices)
    log.info(
        "effective batch %d = %d per device x %d devices x %d accumulation steps",
        cfg.model.per_device_batch_size * devices * accumulate,
        cfg.model.per_device_batch_size,
        devices,
        accumulate,
    )
    if torch.cuda.is_available():
        torch.set_float32_matmul_precision("high")
    callbacks = _instantiate_all(cfg.get("callbacks"))
    loggers = _instantiate_all(cfg.get("logger"))
    trainer: pl.Trainer = instantiate(
        cfg.trainer,
        callbacks=callbacks,
        logger=loggers or False,
        accumulate_grad_batches=accumulate,
        precision=resolve_precision(cfg.trainer.get("precision", "auto")),
    )
    hparams = {
        "cfg": OmegaConf.to_container(cfg, resolve=True),
        "model_path": model_path,
        "accumulate_grad_batches": accumulate,
        "data_stats": datamodule.stats,
    }
    for lg in trainer.loggers:
        lg.log_hyperparams(hparams)

    if cfg.get("validate_first"):
        trainer.validate(module, datamodule=datamodule)
    trainer.fit(module, datamodule=datamodule, ckpt_path=_resolve_ckpt(cfg.get("ckpt_path"), cfg))

    ckpt_cb = trainer.checkpoint_callback
    best_path = ckpt_cb.best_model_path if ckpt_cb is not None else ""
    best = ckpt_cb.best_model_score if ckpt_cb is not None else None
    if best is None:
        best = trainer.callback_metrics.get("val/set_f1")
    best_f1 = float(best) if best is not None else float("nan")
    if trainer.is_global_zero:
        epochs, step = trainer.current_epoch, trainer.global_step
        last = _resolve_ckpt_or_none(cfg)
        if last and step == 0:  # ddp_spawn: the launcher process does not see the loop state
            ckpt = torch.load(last, map_location="cpu", weights_only=False)
            epochs, step = ckpt["epoch"] + 1, ckpt["global_step"]
        summary = {
            "best_val_set_f1": best_f1,
            "best_checkpoint": best_path or None,
            "epochs": epochs,
            "global_step": step,
            "model_path": model_path,
            "accumulate_grad_batches": accumulate,
            "data_stats": datamodule.stats,
        }
        if best_path:
            ckpt = torch.load(best_path, map_location="cpu", weights_only=False)
            module.load_state_dict(ckpt["state_dict"])
            summary |= {"best_epoch": ckpt["epoch"], "best_global_step": ckpt["global_step"]}
        export = module.export_hf(
            out_dir / "hf_model", config=OmegaConf.to_container(cfg, resolve=True), **summary
        )
        write_json(out_dir / "train_summary.json", {**summary, "hf_model": str(export)})
        log.info("best val/set_f1 %.4f; exported %s", best_f1, export)
    return best_f1
