"""Lightning callbacks of propositionizer training: the validation predictions writer,
glibc's heap limits (`HeapLimit`, `utils/malloc.py`) and the weights' moving average
(`WeightEMA`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import WeightAveraging
from pytorch_lightning.utilities import rank_zero_only

from densex.utils.io import write_jsonl
from densex.utils.logging import get_logger
from densex.utils.malloc import set_heap_thresholds, trim_heap

log = get_logger(__name__)


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


class HeapLimit(pl.Callback):
    """glibc heap settings for a fit (`utils/malloc.py`): fixed thresholds (`mmap_threshold`
    null keeps both of glibc's dynamic thresholds, `trim_threshold` included), a heap trim
    every `trim_every_n_steps` training batches (null: never) and after each validation (the
    generation's caches are its largest blocks)."""

    def __init__(
        self,
        mmap_threshold: int | None = 1 << 20,
        trim_threshold: int = 1 << 20,
        trim_every_n_steps: int | None = None,
    ) -> None:
        self.mmap_threshold = mmap_threshold
        self.trim_threshold = trim_threshold
        self.trim_every_n_steps = trim_every_n_steps

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        every = self.trim_every_n_steps
        if every and (batch_idx + 1) % every == 0:
            trim_heap()

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.mmap_threshold is None:
            return
        if set_heap_thresholds(self.mmap_threshold, self.trim_threshold):
            log.info(
                "heap: glibc mmap threshold %d B, trim threshold %d B",
                self.mmap_threshold,
                self.trim_threshold,
            )
        else:
            log.warning(
                "heap: mallopt is missing (not glibc) or refused %d / %d B; glibc's dynamic "
                "thresholds may still apply",
                self.mmap_threshold,
                self.trim_threshold,
            )

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        trim_heap()


class EMADecay:
    """`avg_fn` of `torch.optim.swa_utils.AveragedModel`: an exponential moving average whose
    decay after n updates is min(`decay`, (1 + n) / (`warmup` + n)), the warm-up of timm's and
    TensorFlow's EMA (the first weights leave the average within a few updates). A class, not
    a closure, so the callback pickles (ddp_spawn)."""

    def __init__(self, decay: float = 0.99, warmup: float = 10.0) -> None:
        if not 0.0 <= decay < 1.0 or warmup < 1.0:
            raise ValueError(f"EMA decay must be in [0, 1) and warmup >= 1, got {decay}, {warmup}")
        self.decay, self.warmup = decay, warmup

    def rate(self, n: int) -> float:
        """The decay applied at the update after `n` earlier ones."""
        return min(self.decay, (1.0 + n) / (self.warmup + n))

    def __call__(
        self, averaged: torch.Tensor, current: torch.Tensor, num_averaged: torch.Tensor
    ) -> torch.Tensor:
        return torch.lerp(averaged, current, 1.0 - self.rate(int(num_averaged)))


class WeightEMA(WeightAveraging):
    """Validate, checkpoint and export a moving average of the weights (`EMADecay`), updated
    after every optimizer step (Lightning's `WeightAveraging`: the checkpoints' `state_dict`
    holds the average, the live weights travel beside it for resuming). Buffers (position
    ids) are copied, not averaged."""

    def __init__(self, decay: float = 0.99, warmup: float = 10.0) -> None:
        super().__init__(use_buffers=False, avg_fn=EMADecay(decay, warmup))
