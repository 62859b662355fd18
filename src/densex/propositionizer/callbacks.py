"""Lightning callbacks of propositionizer training."""

from __future__ import annotations

import os
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.utilities import rank_zero_only

from densex.utils.io import write_jsonl


class ValidationPredictionsWriter(pl.Callback):
    """Write each validation run's generations, parses and per-passage set-F1 to JSONL.

    One file per validation run (``epoch=003-step=000120.jsonl``), so the outputs behind a
    logged `val/set_f1` can always be read and compared across epochs.
    """

    def __init__(self, dirpath: str | os.PathLike) -> None:
        self.dirpath = Path(dirpath)

    @rank_zero_only
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        rows = getattr(pl_module, "last_val_predictions", None)
        if trainer.sanity_checking or not rows:
            return
        name = f"epoch={trainer.current_epoch:03d}-step={trainer.global_step:06d}.jsonl"
        write_jsonl(self.dirpath / name, rows)
        pl_module.last_val_predictions = []
