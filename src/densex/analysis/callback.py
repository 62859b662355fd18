"""A Hydra callback running `analyze_sweep` at the end of an evaluate multirun (after
`densex.report.callback.AggregateResults` has written the plain tables)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from densex.analysis.significance import N_RESAMPLES
from densex.analysis.sweep import analyze_sweep


class AnalyzeSweep(Callback):
    """`hydra.callbacks.analysis: {_target_: densex.analysis.callback.AnalyzeSweep, ks: [5, 20],
    n_resamples: 10000, seed: 0, alpha: 0.05, popularity: null}`."""

    def __init__(
        self,
        ks: Sequence[int] = (5, 20),
        n_resamples: int = N_RESAMPLES,
        seed: int = 0,
        alpha: float = 0.05,
        popularity: str | None = None,
    ) -> None:
        self.ks = tuple(int(k) for k in ks)
        self.n_resamples, self.seed, self.alpha = int(n_resamples), int(seed), float(alpha)
        self.popularity = popularity

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        analyze_sweep(
            Path(str(config.hydra.sweep.dir)), self.ks, self.n_resamples, self.seed,
            self.alpha, self.popularity,
        )  # fmt: skip
