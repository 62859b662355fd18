"""`LogProgress`: periodic log lines for Lightning's loops when stderr is not a terminal (the
`progress.Progress` lines of every other long step, for the train, validation and predict
loops)."""

from __future__ import annotations

import time
from typing import Any

import pytorch_lightning as pl

from densex.utils.logging import interval_s
from densex.utils.progress import Progress

__all__ = ["LogProgress"]


class LogProgress(pl.Callback):
    """Periodic log lines for Lightning's train, validation and predict loops, used when stderr
    is not a terminal (where Lightning's bar would print nothing, or raw escapes, into logs).

    Lines look like `validation (epoch 2): 40/125 batches (32%), 0.8 batches/s, 0:50
    elapsed, ~1:46 left`, every `every_s` seconds, and `... done` at the end of each loop with
    the logged metrics on the progress bar (`val/set_f1`, `val/loss`, ...).
    """

    def __init__(self, every_s: float | None = None) -> None:
        super().__init__()
        self.every_s = every_s
        self._p: Progress | None = None
        self._last_line = -float("inf")

    def _start(self, description: str, total: Any) -> None:
        total = int(total) if isinstance(total, (int, float)) and total == total else None
        if total is not None and total > 10**12:  # inf batches (iterable datasets)
            total = None
        self._p = Progress(
            description, total=total, unit="batches", every_s=self.every_s, tty=False
        )
        self._p.__enter__()

    def _end(self, trainer: pl.Trainer, always: bool = True) -> None:
        """Close the loop's progress: its line with the bar's metrics (`val/set_f1=...`);
        for training epochs at most one per `every_s`, so 1-batch epochs do not flood."""
        p, self._p = self._p, None
        if p is None:
            return
        now = time.perf_counter()
        every = interval_s() if self.every_s is None else self.every_s
        show = always or now - self._last_line >= every
        metrics = {
            k: float(v)
            for k, v in trainer.progress_bar_metrics.items()
            if isinstance(v, (int, float)) or hasattr(v, "item")
        }
        extra = "; " + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items()) if metrics else ""
        p.close(extra, log_line=show)
        if show:
            self._last_line = now

    def _advance(self) -> None:
        if self._p is not None:
            self._p.advance(1)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start(f"train (epoch {trainer.current_epoch})", trainer.num_training_batches)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._advance()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        last = trainer.current_epoch + 1 >= (trainer.max_epochs or 0) > 0
        self._end(trainer, always=last)

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self._outer = self._p  # validation runs inside a training epoch
        self._p = None
        self._start(f"validation (epoch {trainer.current_epoch})", sum(trainer.num_val_batches))

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ) -> None:
        if not trainer.sanity_checking:
            self._advance()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after the module's epoch-end hook, so its metrics (val/set_f1) are on the bar
        if trainer.sanity_checking:
            return
        self._end(trainer)
        self._p = getattr(self, "_outer", None)

    def on_predict_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start("predict", sum(trainer.num_predict_batches))

    def on_predict_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ) -> None:
        self._advance()

    def on_predict_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._end(trainer)
