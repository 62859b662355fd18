"""What one process encodes: one shard's texts at a time, longest first, its share of shards.

`ShardTexts` reads a shard's units from the memory-mapped unit tables (a path until first used
in a process, so ddp_spawn pickles no table), formats them for the encoder, orders them longest
first and records the ones the tokenizer truncates (`trunc-<stem>.json`). `UnitsDataModule`
gives rank r the pending shards r, r + world, ... (whole shards, so each is written once), as
`(row, text)` items tokenised in the loader. Memory: one shard's texts, whatever the corpus
size.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from densex.corpus.columnar import ArrowTable
from densex.corpus.units import unit_tables
from densex.retrieval.encoders import RetrieverSpec, TextEncoder, format_unit_texts
from densex.utils.io import write_json
from densex.utils.shards import rank_share, shard_stem

__all__ = ["ShardTexts", "UnitsDataModule", "UnitsDataset"]


class ShardTexts:
    """The texts of one shard at a time, read from the memory-mapped unit tables.

    Holds only the units path until first use in a process (so ddp_spawn pickles a path, not a
    table), then formats one shard's units for the encoder, orders them longest first (less
    padding; stable, so ties keep file order) and records the units the tokenizer truncates
    (`trunc-<stem>.json`). Memory: one shard's texts, whatever the corpus size.
    """

    def __init__(self, units_path: str | Path, spec: RetrieverSpec, encoder: Any, out: Path):
        self.units_path, self.spec, self.encoder, self.out = Path(units_path), spec, encoder, out
        self._shard: tuple[int, int] | None = None
        self._in_memory: tuple[ArrowTable | None, ArrowTable] | None = None
        self._texts: list = []
        self._order: list[int] = []

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_shard=None, _texts=[], _order=[], _in_memory=None)
        return state

    def _tables(self) -> tuple[ArrowTable | None, ArrowTable]:
        """Arrow shards: mapped afresh on each call; a standalone JSONL file: read once."""
        if self._in_memory is not None:
            return self._in_memory
        tables = unit_tables(self.units_path)
        if tables[0] is None:
            self._in_memory = tables
        return tables

    def ids(self, shard: tuple[int, int]) -> list[str]:
        """Unit ids of rows shard[0]..shard[1], in file order."""
        return self._tables()[1].slice("id", *shard)

    def get(self, shard: tuple[int, int]) -> tuple[list, list[int]]:
        """(texts of rows shard[0]..shard[1], rows in encoding order). The tables are mapped
        afresh for each shard and unmapped after, so pages read stay out of RSS."""
        if shard != self._shard:
            passages, units = self._tables()
            if passages is None:  # a standalone units file: titles are its own
                titles = units.slice("title", *shard)
            else:
                rows = units.table.column("passage_row").slice(shard[0], shard[1] - shard[0])
                titles = passages.take("title", rows.to_numpy())
            texts = format_unit_texts(self.spec, titles, units.slice("text", *shard))
            ids = units.slice("id", *shard)
            del passages, units
            order, truncated = _length_order(self.encoder, texts, range(*shard))
            cut = [uid for uid, t in zip(ids, truncated) if t]
            write_json(self.out / f"trunc-{shard_stem(*shard)}.json", cut, indent=None)
            self._shard, self._texts, self._order = shard, texts, order
        return self._texts, self._order


class UnitsDataset(Dataset):
    """(row, text) for the shards one process encodes, shard after shard, each longest first."""

    def __init__(
        self, shards: Sequence[tuple[int, int]], texts: ShardTexts, limit: int | None = None
    ) -> None:
        self.shards, self.texts, self.limit = list(shards), texts, limit
        self._ends = np.cumsum([e - s for s, e in self.shards])

    def __len__(self) -> int:
        n = int(self._ends[-1]) if len(self._ends) else 0
        return n if self.limit is None else min(n, self.limit)

    def __getitem__(self, i: int) -> tuple[int, Any]:
        w = int(np.searchsorted(self._ends, i, side="right"))
        shard = self.shards[w]
        texts, order = self.texts.get(shard)
        row = order[i - (int(self._ends[w - 1]) if w else 0)]
        return row, texts[row - shard[0]]


class _Collate:
    """Tokenise a batch in the loader (a class, not a closure, so ddp_spawn can pickle it)."""

    def __init__(self, encoder: TextEncoder) -> None:
        self.encoder = encoder

    def __call__(self, batch: list[tuple[int, Any]]) -> dict[str, Any]:
        rows = torch.tensor([r for r, _ in batch], dtype=torch.long)
        features = dict(self.encoder.tokenize([t for _, t in batch]))
        features["rows"] = rows
        return features


class UnitsDataModule(pl.LightningDataModule):
    """Gives rank r the pending shards r, r+world, ...: whole shards, so each is written once."""

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
        mine = rank_share(self.shards, rank, world)
        # more ranks than pending shards: Lightning wants a batch on every rank, so an idle
        # rank encodes one row of the first shard, which its writer never completes or writes
        dataset = (
            UnitsDataset(mine, self.texts)
            if mine or not self.shards
            else UnitsDataset(self.shards[:1], self.texts, limit=1)
        )
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=False,
            collate_fn=_Collate(self.encoder),
        )


def _length_order(encoder: Any, texts: Sequence[Any], rows: range) -> tuple[list[int], np.ndarray]:
    """Rows of one shard, longest first by token count (stable, so ties keep file order), and
    which of them the tokenizer truncates (more tokens than it keeps). An encoder that neither
    pads nor truncates (`pads = False`: hashing) keeps file order, without a counting pass."""
    if not getattr(encoder, "pads", True):
        return list(rows), np.zeros(len(rows), dtype=bool)
    flat = [t if isinstance(t, str) else f"{t[0]} {t[1]}" for t in texts]
    lengths = np.asarray(encoder.token_lengths(flat))
    truncated = lengths > encoder.max_tokens
    return [rows[i] for i in np.argsort(-lengths, kind="stable")], truncated
