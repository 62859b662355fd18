"""Progress for every step that can take more than a few seconds, in a terminal and in logs.

On a terminal (stderr is a TTY) a rich progress bar with the rate (`queries/s`, `units/s`);
elsewhere (a log file, SLURM, `nohup`, `> run.log 2>&1`) no bar and no ANSI escapes, but a log
line every `interval_s` seconds (`DENSEX_PROGRESS_S`, default 30) with count, percent, rate and
time left, and one closing line with the total time. Lightning loops get the same through
`LogProgress`, a callback used instead of the progress bar when stderr is not a terminal.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import pytorch_lightning as pl

from densex.utils.logging import interval_s

log = logging.getLogger("densex.progress")

T = TypeVar("T")


def is_tty() -> bool:
    """Whether progress bars can be drawn: stderr is a terminal (and `DENSEX_PROGRESS` is not
    `log`, which forces log lines, e.g. for tests)."""
    if os.environ.get("DENSEX_PROGRESS", "").lower() == "log":
        return False
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def _rate(r: float) -> str:
    return f"{r:,.0f}" if r >= 100 else f"{r:.1f}" if r >= 1 else f"{r:.2f}"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """A counted step: `with Progress("search", total=n, unit="queries") as p: p.advance(k)`.

    A rich bar on a terminal; periodic log lines otherwise (see the module docstring). The
    closing line (`search: 7,431 queries in 1:12 (103.2 queries/s)`) is logged in both cases,
    so the run dir's log file always records how long each step took.
    """

    def __init__(
        self,
        description: str,
        total: int | None = None,
        unit: str = "items",
        every_s: float | None = None,
        tty: bool | None = None,
    ) -> None:
        self.description, self.total, self.unit = description, total, unit
        self.every_s = interval_s() if every_s is None else every_s
        self.tty = is_tty() if tty is None else tty
        self.done = 0
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        self.t0 = self._last = time.perf_counter()
        if self.tty:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import (
                Progress as RichProgress,
            )

            self._bar = RichProgress(
                TextColumn("[progress.description]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=self.total, rate="")
        return self

    def rate(self) -> float:
        return self.done / max(time.perf_counter() - self.t0, 1e-9)

    def advance(self, n: int = 1) -> None:
        """Count `n` more items done."""
        self.done += n
        now = time.perf_counter()
        if self._bar is not None:
            self._bar.update(self._task, advance=n, rate=f"{_rate(self.rate())} {self.unit}/s")
        elif now - self._last >= self.every_s:
            self._last = now
            log.info("%s", self.line())

    def line(self) -> str:
        """`description: done/total unit (pct%), rate unit/s, elapsed, ~left`."""
        elapsed = time.perf_counter() - self.t0
        rate = self.rate()
        if self.total:
            left = (self.total - self.done) / rate if rate > 0 else float("nan")
            eta = f", ~{_duration(left)} left" if left == left else ""
            return (
                f"{self.description}: {self.done:,}/{self.total:,} {self.unit} "
                f"({100.0 * self.done / self.total:.0f}%), {_rate(rate)} {self.unit}/s, "
                f"{_duration(elapsed)} elapsed{eta}"
            )
        return f"{self.description}: {self.done:,} {self.unit}, {_rate(rate)} {self.unit}/s"

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.close(log_line=exc_type is None)

    def close(self, extra: str = "", log_line: bool = True) -> None:
        """Stop the bar; log the closing line (+ `extra`) unless `log_line` is false."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        if log_line:
            elapsed = time.perf_counter() - self.t0
            log.info(
                "%s: %s %s in %s (%s %s/s)%s",
                self.description,
                f"{self.done:,}",
                self.unit,
                _duration(elapsed),
                _rate(self.rate()),
                self.unit,
                extra,
            )


def track(
    items: Iterable[T],
    description: str,
    total: int | None = None,
    unit: str = "items",
) -> Iterator[T]:
    """Iterate `items` under a `Progress` (total from `len(items)` when it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(description, total=total, unit=unit) as p:
        for item in items:
            yield item
            p.advance(1)


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


def progress_callbacks(enabled: bool = True, bar: Any = None) -> list[Any]:
    """What a Trainer shows: `bar` (Lightning's default bar when None) on a terminal,
    `LogProgress` lines elsewhere, nothing when `enabled` is false."""
    if not enabled:
        return []
    if is_tty():
        return [bar] if bar is not None else []
    return [LogProgress()]
