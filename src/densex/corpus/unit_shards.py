"""The units stage's second pass: unit tables not made with the passage shards.

Propositions (`{"id": passage_id, "propositions": [str, ...]}` JSONL) and a ready-made
collection's units (`corpus.sources.<granularity>`: FactoidWiki's sentences / propositions)
are streamed into `arrow/<granularity>/NNNNN.arrow` shards of `corpus.shard_units` units,
each unit pointing at its passage's row. A unit of an unknown passage, or a passage with no
propositions row, is a located `DataError` for `Skips`; in a corpus that keeps some articles
only (`corpus.titles`), units of passages outside it are left out and counted instead (a
propositions file of the whole corpus serves every filter of it). Memory: one dict entry and
one flag per passage, nothing per unit.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from densex.corpus.collections import iter_unit_batches
from densex.corpus.columnar import UNIT_SCHEMA, ArrowTable, shard_path, write_shard
from densex.corpus.readers import Skips, iter_proposition_rows
from densex.corpus.segment import count_words
from densex.corpus.sources import unit_sources
from densex.corpus.spec import CorpusSpec
from densex.corpus.titles import TitleFilter
from densex.corpus.units_key import DEFAULT_SHARD_UNITS
from densex.utils.io import DataError
from densex.utils.progress import Progress

__all__ = ["build_unit_tables"]


class _UnitShards:
    """Unit rows appended one by one, written as `arrow/<granularity>/NNNNN.arrow` shards of
    `shard_units` rows (always at least one shard, possibly empty)."""

    def __init__(self, out: Path, granularity: str, shard_units: int) -> None:
        self.dir, self.shard_units, self.index = out / "arrow" / granularity, shard_units, 0
        shutil.rmtree(self.dir, ignore_errors=True)
        self.cols: dict[str, list] = {f.name: [] for f in UNIT_SCHEMA}

    def add(self, uid: str, pid: str, prow: int, text: str) -> None:
        for key, value in zip(("id", "passage_id", "passage_row", "text", "words"),
                              (uid, pid, prow, text, count_words(text))):  # fmt: skip
            self.cols[key].append(value)
        if len(self.cols["id"]) >= self.shard_units:
            self.flush()

    def flush(self) -> None:
        write_shard(shard_path(self.dir, self.index), self.cols, UNIT_SCHEMA)
        self.cols, self.index = {f.name: [] for f in UNIT_SCHEMA}, self.index + 1

    def close(self) -> None:
        if self.cols["id"] or self.index == 0:
            self.flush()


def _passage_rows(passages: ArrowTable) -> dict[str, int]:
    """Passage id -> row: one dict entry per passage (the only per-passage map built)."""
    return {pid: i for i, pid in enumerate(passages.slice("id", 0, len(passages)))}


def _build_proposition_shards(
    path: str | os.PathLike, passages: ArrowTable, row_of: dict[str, int], out: Path,
    skips: Skips, shard_units: int, filtered: bool,
) -> int:  # fmt: skip
    """Proposition units from `{"id": passage_id, "propositions": [str, ...]}` JSONL, in the
    file's row order, streamed into shards. Every passage must have a row and every row a known
    passage, so a truncated or mismatched file fails loudly (or, with `on_error="skip"`, every
    gap is counted); `filtered` (a title filter is set): rows of other passages are left out,
    and their number returned. Memory: one dict entry and one flag per passage, nothing per
    unit."""
    seen = np.zeros(len(passages), dtype=bool)
    shards = _UnitShards(out, "proposition", shard_units)
    outside = 0
    with Progress("units: propositions", unit="passages") as bar:
        for lineno, pid, props in iter_proposition_rows(path, skips):
            bar.advance(1)
            prow = row_of.get(pid)
            if prow is None and filtered:
                outside += 1
                continue
            if prow is None:
                skips(DataError(path, lineno, "id", f"unknown passage id {pid!r}"))
                continue
            if seen[prow]:
                skips(DataError(path, lineno, "id", f"duplicate passage id {pid!r}"))
                continue
            seen[prow] = True
            for i, text in enumerate(props):
                shards.add(f"{pid}::p{i}", pid, prow, text)
    shards.close()
    for prow in np.flatnonzero(~seen).tolist():
        pid = passages.slice("id", prow, prow + 1)[0]
        skips(DataError(path, None, "id", f"passage {pid!r} has no propositions row"))
    return outside


def _build_collection_shards(
    source_cfg: dict[str, Any], granularity: str, row_of: dict[str, int], out: Path,
    skips: Skips, shard_units: int, filtered: bool,
) -> int:  # fmt: skip
    """Units of a ready-made collection (`corpus.sources.<granularity>`: FactoidWiki's
    sentences / propositions), passage by the source's mapping rule, streamed into shards in
    the collection's order; a unit of an unknown passage is a located `DataError` (`filtered`:
    left out, and the number of those returned)."""

    shards = _UnitShards(out, granularity, shard_units)
    source = str(source_cfg.get("path"))
    outside = 0
    with Progress(f"units: {granularity}", unit="units") as bar:
        for batch in iter_unit_batches(source_cfg, skips, 10_000):
            for u in batch:
                prow = row_of.get(u["passage_id"])
                if prow is None and filtered:
                    outside += 1
                elif prow is None:
                    why = f"unit {u['id']!r}: unknown passage {u['passage_id']!r}"
                    skips(DataError(source, None, "passage_id", why))
                else:
                    shards.add(u["id"], u["passage_id"], prow, u["text"])
            bar.advance(len(batch))
    shards.close()
    return outside


def build_unit_tables(
    corpus: CorpusSpec, out: Path, passages: ArrowTable, wanted: Sequence[str],
    propositions_path: str | os.PathLike | None, skips: Skips,
    outside: dict[str, int] | None = None,
) -> list[str]:  # fmt: skip
    """The unit tables beyond the passage shards' own (a collection's sentences/propositions,
    the propositions file: `corpus.sources.unit_sources`); returns the granularities built,
    in order. With a title filter (`corpus.titles`), `outside` (when given) receives the
    number of rows of passages outside the corpus per granularity."""
    shard_units = int(corpus.shard_units or DEFAULT_SHARD_UNITS)
    inputs = unit_sources(corpus, list(wanted), propositions_path)
    row_of = _passage_rows(passages) if inputs else None  # passage id -> row, built once
    filtered = TitleFilter.from_spec(corpus.titles, "corpus.titles").active
    left_out: dict[str, int] = {}
    grans = []
    for g in wanted:
        source = inputs.get(g)
        if isinstance(source, str):  # the propositions file
            left_out[g] = _build_proposition_shards(
                source, passages, row_of, out, skips, shard_units, filtered
            )
        elif source is not None:
            left_out[g] = _build_collection_shards(
                source, g, row_of, out, skips, shard_units, filtered
            )
        elif g == "proposition":
            shutil.rmtree(out / "arrow" / "proposition", ignore_errors=True)
            (out / "proposition.jsonl").unlink(missing_ok=True)
            continue
        grans.append(g)
    if outside is not None and filtered:
        outside.update(left_out)
    return grans
