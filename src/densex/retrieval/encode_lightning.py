"""The Lightning side of encoding: the predict module, the data module, the shard writer and
the progress bar (imported only when something is encoded: `retrieval.encode`).

`EncoderModule` turns a batch into `{rows, float32 embeddings}`; `UnitsDataModule` gives each
rank its share of the pending shards (`encode_data.ClaimedUnits`); `EmbeddingShardWriter`
collects rows per shard and writes a shard (ids, then `.npy`, each atomic) once all its rows
are encoded; `UnitsProgressBar` is Lightning's rich bar with a units/s column.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import BasePredictionWriter, RichProgressBar
from rich.progress import ProgressColumn
from rich.text import Text
from torch.utils.data import DataLoader

from densex.retrieval.encode_data import ClaimedUnits, ShardTexts, _Collate, shard_claim
from densex.retrieval.encoders import TextEncoder
from densex.utils.io import atomic_open, write_json
from densex.utils.locks import release
from densex.utils.progress import is_tty
from densex.utils.shards import rank_share, shard_stem

__all__ = [
    "EmbeddingShardWriter",
    "EncoderModule",
    "UnitsDataModule",
    "UnitsProgressBar",
    "units_progress_bar",
]


class EncoderModule(pl.LightningModule):
    """The document encoder under `Trainer.predict`: batch -> {rows, float32 embeddings}."""

    def __init__(self, encoder: TextEncoder) -> None:
        super().__init__()
        self.encoder = encoder

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, torch.Tensor]:
        features = {k: v for k, v in batch.items() if k != "rows"}
        return {"rows": batch["rows"].cpu(), "embeddings": self.encoder(features).float().cpu()}


class UnitsDataModule(pl.LightningDataModule):
    """Gives rank r the pending shards r, r+world, ... to claim: whole shards, so each is
    written once."""

    def __init__(
        self,
        shards: Sequence[tuple[int, int]],
        texts: ShardTexts,
        encoder: TextEncoder,
        batch_size: int,
    ) -> None:
        super().__init__()
        self.shards, self.texts = list(shards), texts
        self.encoder, self.batch_size = encoder, batch_size

    def predict_dataloader(self) -> DataLoader:
        rank, world = self.trainer.global_rank, self.trainer.world_size
        # each rank claims among its own share (r, r + world, ...); more ranks than pending
        # shards, or every shard claimed elsewhere: one probe row (never written)
        mine = rank_share(self.shards, rank, world)
        dataset = ClaimedUnits(mine, self.texts, self.batch_size, probe=self.shards[:1])
        # the dataset yields whole batches (cut within a shard): the loader only tokenises them
        return DataLoader(
            dataset, batch_size=None, shuffle=False, collate_fn=_Collate(self.encoder)
        )


class EmbeddingShardWriter(BasePredictionWriter):
    """Collects rows per shard; writes a shard (ids, then .npy, each atomic) once it is full,
    then releases its claim."""

    def __init__(
        self,
        out_dir: str | Path,
        shards: Sequence[tuple[int, int]],
        texts: ShardTexts,
        dtype: str,
    ) -> None:
        super().__init__("batch")
        self.out_dir, self.shards, self.texts, self.dtype = (
            Path(out_dir),
            list(shards),
            texts,
            dtype,
        )
        self._starts = np.array([s for s, _ in self.shards], dtype=np.int64)
        self._buffers: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.shards_written = self.rows_written = 0

    def write_on_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        prediction: dict[str, torch.Tensor],
        batch_indices: Sequence[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        rows = prediction["rows"].numpy()
        emb = prediction["embeddings"].numpy()
        if (rows < 0).any():  # a probe row (`ClaimedUnits`): encoded, never written
            keep = rows >= 0
            rows, emb = rows[keep], emb[keep]
        which = np.searchsorted(self._starts, rows, side="right") - 1
        for w in np.unique(which):
            shard = self.shards[w]
            sel = which == w
            if shard not in self._buffers:
                n = shard[1] - shard[0]
                self._buffers[shard] = (
                    np.zeros((n, emb.shape[1]), dtype=np.float32),
                    np.zeros(n, dtype=bool),
                )
            buf, seen = self._buffers[shard]
            local = rows[sel] - shard[0]
            if seen[local].any():
                raise RuntimeError(f"rows encoded twice in shard {shard}")
            buf[local], seen[local] = emb[sel], True
            if seen.all():
                self._write_shard(shard, buf)
                del self._buffers[shard]

    def _write_shard(self, shard: tuple[int, int], emb: np.ndarray) -> None:
        stem = shard_stem(*shard)
        write_json(self.out_dir / f"ids-{stem}.json", self.texts.ids(shard), indent=None)
        with atomic_open(self.out_dir / f"emb-{stem}.npy", "wb") as f:
            np.save(f, emb.astype(self.dtype, copy=False))
        release(shard_claim(self.out_dir, shard))  # the claim `ClaimedUnits` took
        self.shards_written += 1
        self.rows_written += shard[1] - shard[0]


class _UnitsSpeedColumn(ProgressColumn):
    def __init__(self, bar: UnitsProgressBar) -> None:
        super().__init__()
        self.bar = bar

    def render(self, task: Any) -> Text:
        return Text(f"{self.bar.units_per_second:,.1f} units/s", style="cyan")


class UnitsProgressBar(RichProgressBar):
    """Lightning's rich bar plus a units/s column (batches/s hides the batch size)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._units, self._t0 = 0, time.perf_counter()

    @property
    def units_per_second(self) -> float:
        """Units encoded per second since predict started."""
        return self._units / max(time.perf_counter() - self._t0, 1e-9)

    def configure_columns(self, trainer: pl.Trainer) -> list:
        return [*super().configure_columns(trainer), _UnitsSpeedColumn(self)]

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._units, self._t0 = 0, time.perf_counter()
        super().on_predict_start(trainer, pl_module)

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self._units += len(batch["rows"])
        super().on_predict_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)


def units_progress_bar(trainer_args: dict[str, Any] | None) -> list:
    """`[UnitsProgressBar()]` on a terminal, `[]` when the trainer's plain values turn progress
    bars off or stderr is not a terminal."""
    enabled = (trainer_args or {}).get("enable_progress_bar", True)
    # without a terminal `predict_trainer` logs periodic lines (LogProgress) instead
    return [UnitsProgressBar()] if enabled and is_tty() else []
