"""What one process encodes: one shard's texts at a time, longest first, its share of shards.

`ShardTexts` reads a shard's units from the memory-mapped unit tables (a path until first used
in a process, so ddp_spawn pickles no table), formats them for the encoder, orders them longest
first and records the ones the tokenizer truncates (`trunc-<stem>.json`). `ClaimedUnits`
yields a rank's share of the pending shards (r, r + world, ...: whole shards, so each is
written once; `encode_lightning.UnitsDataModule` hands it out) as batches of `(row, text)`
items tokenised in the loader (`_Collate`), each shard claimed first, so other processes
encoding the same directory take the other shards. Nothing here imports Lightning: opening a
built cache (search, `serve.py`) never pays its import (seconds).
A batch never spans two shards: a unit's vector depends on its batch (its padded length, the
matmul shapes), so batches cut from the shard alone make every shard's bytes the same whatever
the world size or which shards were already done (2 ranks or a resume equal 1 process byte for
byte). Memory: one shard's texts, whatever the corpus size. Late chunking
(`retriever.late_chunking`) reads a shard as its units' passages instead
(`retrieval.late_data.LateShardTexts`: the same `ids` / `batches` / `probe`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset

from densex.corpus.columnar import ArrowTable
from densex.corpus.units import unit_tables
from densex.retrieval.encoders import RetrieverSpec, TextEncoder, format_unit_texts
from densex.retrieval.late import LateContext, tokenize_late
from densex.utils.io import write_json
from densex.utils.locks import claim_each
from densex.utils.logging import get_logger
from densex.utils.shards import batched, shard_stem

log = get_logger("densex.retrieval.encode")  # the encoding's log lines keep one name

__all__ = ["ClaimedUnits", "ShardTexts", "shard_claim", "shard_written"]


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

    def batches(self, shard: tuple[int, int], batch_size: int) -> Iterator[list[tuple[int, Any]]]:
        """The shard's `(row, text)` items, longest first, in batches of `batch_size`."""
        texts, order = self.get(shard)
        for rows in batched(order, batch_size):
            yield [(row, texts[row - shard[0]]) for row in rows]

    def probe(self, shard: tuple[int, int]) -> list[tuple[int, Any]]:
        """A batch of one item of `shard` whose row is negative (encoded, never written)."""
        texts, order = self.get(shard)
        return [(-1 - order[0], texts[order[0] - shard[0]])]


def shard_claim(out: Path, shard: tuple[int, int]) -> Path:
    """The artifact a shard claim locks (`utils.locks`): the shard's `.npy`, written last."""
    return out / f"emb-{shard_stem(*shard)}.npy"


def shard_written(out: Path, shard: tuple[int, int]) -> bool:
    """Both files of the shard exist (each is written atomically, the `.npy` last)."""
    stem = shard_stem(*shard)
    return (out / f"emb-{stem}.npy").exists() and (out / f"ids-{stem}.json").exists()


class ClaimedUnits(IterableDataset):
    """Batches of (row, text) of the shards this process claims, shard after shard, each
    longest first, cut from one shard at a time (`batch_size` rows, a shard's last batch
    shorter): a batch never mixes two shards, so a shard's vectors do not depend on which
    shards this process encodes (module docstring).

    A shard already written or claimed by another process is skipped (`utils.locks.claim_each`:
    two processes on one pending directory share its shards); a claimed one stays locked until
    the writer has written it. When nothing could be claimed, one probe row of `probe` (rows
    are negative: the writer drops them) gives Lightning its batch on every rank."""

    def __init__(
        self,
        shards: Sequence[tuple[int, int]],
        texts: ShardTexts,
        batch_size: int,
        probe: Sequence[tuple[int, int]] = (),
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {batch_size}")
        self.shards, self.texts, self.probe = list(shards), texts, list(probe)
        self.batch_size = batch_size

    def __len__(self) -> int:  # batches, an upper bound: shards claimed elsewhere are skipped
        return max(1, sum(-(-(e - s) // self.batch_size) for s, e in self.shards))

    def __iter__(self) -> Iterator[list[tuple[int, Any]]]:
        out = self.texts.out
        claimed = 0
        for shard in claim_each(
            self.shards, partial(shard_claim, out), partial(shard_written, out), "embedding shard"
        ):
            claimed += 1
            log.info("encoding shard %s (%d units)", shard_stem(*shard), shard[1] - shard[0])
            yield from self.texts.batches(shard, self.batch_size)
        if not claimed and (self.probe or self.shards):
            yield self.texts.probe((self.probe or self.shards)[0])


class _Collate:
    """Tokenise a batch in the loader (a class, not a closure, so ddp_spawn can pickle it)."""

    def __init__(self, encoder: TextEncoder) -> None:
        self.encoder = encoder

    def __call__(self, batch: list[Any]) -> dict[str, Any]:
        if batch and isinstance(batch[0], LateContext):  # late chunking: contexts of units
            features = tokenize_late(self.encoder, batch, self.encoder.spec.late_overlap)
            features["rows"] = torch.from_numpy(np.concatenate([c.rows for c in batch]))
            return features
        rows = torch.tensor([r for r, _ in batch], dtype=torch.long)
        features = dict(self.encoder.tokenize([t for _, t in batch]))
        features["rows"] = rows
        return features


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
