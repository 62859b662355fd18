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
from omegaconf import DictConfig, OmegaConf

from densex.analysis.significance import N_RESAMPLES
from densex.analysis.sweep import analyze_sweep
from densex.pipelines.edge import wandb_settings
from densex.report.aggregate import aggregate_sweep

__all__ = ["AggregateResults", "AnalyzeSweep"]


def _cutoffs(ks: Sequence[int] | None) -> tuple[int, ...] | None:
    return None if ks is None else tuple(int(k) for k in ks)


class AggregateResults(Callback):
    """`hydra.callbacks.aggregate: {_target_: densex.pipelines.callbacks.AggregateResults,
    ks: null}`: Table 2/3 and the plot of the sweep (`report.aggregate.aggregate_sweep`);
    `ks` Table 2's cut-offs (null: every cut-off of `topk`, R@1 first)."""

    def __init__(self, ks: Sequence[int] | None = None) -> None:
        self.ks = _cutoffs(ks)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        # `now` is cached on the config, so this is the dir the launcher used
        sweep_dir = Path(str(config.hydra.sweep.dir))
        aggregate_sweep(sweep_dir, wandb_settings(config), self.ks)


class AnalyzeSweep(Callback):
    """`hydra.callbacks.analysis: {_target_: densex.pipelines.callbacks.AnalyzeSweep, ks: null,
    n_resamples: 10000, seed: 0, alpha: 0.05, popularity: null}`: significance, win/loss and
    gold tables (`analysis.sweep.analyze_sweep`). `ks` null: the `aggregate` callback's `ks`
    (so both write the same Table 2), and when that is null too every cut-off of `topk`."""

    def __init__(
        self,
        ks: Sequence[int] | None = None,
        n_resamples: int = N_RESAMPLES,
        seed: int = 0,
        alpha: float = 0.05,
        popularity: str | None = None,
    ) -> None:
        self.ks = _cutoffs(ks)
        self.n_resamples, self.seed, self.alpha = int(n_resamples), int(seed), float(alpha)
        self.popularity = popularity

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        ks = self.ks
        if ks is None:
            ks = _cutoffs(OmegaConf.select(config, "hydra.callbacks.aggregate.ks"))
        analyze_sweep(
            Path(str(config.hydra.sweep.dir)), ks, self.n_resamples, self.seed, self.alpha,
            self.popularity,
        )  # fmt: skip
