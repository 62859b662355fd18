"""The Hydra callbacks that end an evaluate multirun (`conf/evaluate.yaml`'s
`hydra.callbacks`): they read the sweep's config and hand plain values to the report and
analysis layers. Hydra calls `on_multirun_end` callbacks in reverse order of the list, so
`AnalyzeSweep` (listed first) runs after `AggregateResults` has written the plain tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from densex.analysis.significance import N_RESAMPLES
from densex.analysis.sweep import analyze_sweep
from densex.pipelines.edge import wandb_settings
from densex.report.aggregate import aggregate_sweep

__all__ = ["AggregateResults", "AnalyzeSweep"]


class AggregateResults(Callback):
    """`hydra.callbacks.aggregate: {_target_: densex.pipelines.callbacks.AggregateResults,
    ks: [5, 20]}`: Table 2/3 and the plot of the sweep (`report.aggregate.aggregate_sweep`)."""

    def __init__(self, ks: Sequence[int] = (5, 20)) -> None:
        self.ks = tuple(int(k) for k in ks)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        # `now` is cached on the config, so this is the dir the launcher used
        sweep_dir = Path(str(config.hydra.sweep.dir))
        aggregate_sweep(sweep_dir, wandb_settings(config), self.ks)


class AnalyzeSweep(Callback):
    """`hydra.callbacks.analysis: {_target_: densex.pipelines.callbacks.AnalyzeSweep, ks: [5, 20],
    n_resamples: 10000, seed: 0, alpha: 0.05, popularity: null}`: significance, win/loss and
    gold tables (`analysis.sweep.analyze_sweep`)."""

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
