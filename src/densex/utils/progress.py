"""Progress for every step that can take more than a few seconds, in a terminal and in logs.

On a terminal (stderr is a TTY) a rich progress bar with the rate (`queries/s`, `units/s`);
elsewhere (a log file, SLURM, `nohup`, `> run.log 2>&1`) no bar and no ANSI escapes, but a log
line every `interval_s` seconds (`DENSEX_PROGRESS_S`, default 30) with count, percent, rate and
time left, and one closing line with the total time. Lightning loops get the same through
`progress_lightning.LogProgress` (a module of its own, so that importing this one does not
import Lightning: the entry points' preflight stays light).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

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
