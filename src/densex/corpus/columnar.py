"""Passages and units as memory-mapped Arrow tables, written shard by shard.

A table is a directory of `NNNNN.arrow` shards, each an Arrow IPC *stream* file (the format
`datasets` caches in: `datasets.Dataset.from_file(shard)` opens one) written atomically once
complete. Opening a table maps every shard (`pa.memory_map`) and concatenates them without a
copy, so a 257M-unit table costs address space, not RAM: only the columns and rows a step
touches are paged in. Evaluation takes `passage_row` and `words` as NumPy arrays (8 + 4 bytes a
unit) and fetches text only for the rows it retrieved.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from densex.utils.io import DataError, atomic_open, numbered_jsonl

__all__ = [
    "PASSAGE_SCHEMA",
    "UNIT_SCHEMA",
    "ArrowTable",
    "shard_path",
    "table_from_jsonl",
    "write_shard",
]

PASSAGE_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("title", pa.string()),
        ("section", pa.string()),
        ("text", pa.string()),
        ("words", pa.int32()),
    ]
)
UNIT_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("passage_id", pa.string()),
        ("passage_row", pa.int64()),
        ("text", pa.string()),
        ("words", pa.int32()),
    ]
)


def shard_path(table_dir: str | os.PathLike, index: int) -> Path:
    """The file of shard `index` of a table directory."""
    return Path(table_dir) / f"{index:05d}.arrow"


def write_shard(path: str | os.PathLike, columns: dict[str, Any], schema: pa.Schema) -> int:
    """Write `columns` (name -> list/array, in `schema`'s order) as one Arrow stream file,
    atomically; return its row count."""
    table = pa.table({f.name: columns[f.name] for f in schema}, schema=schema)
    with atomic_open(path, "wb") as f, pa.ipc.new_stream(f, schema) as writer:
        writer.write_table(table, max_chunksize=64 << 10)
    return table.num_rows


def read_shard(path: str | os.PathLike) -> pa.Table:
    """One shard, memory-mapped (zero-copy: buffers point into the mapping)."""
    try:
        return pa.ipc.open_stream(pa.memory_map(str(path))).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise DataError(path, None, None, f"not a readable Arrow stream file ({e})") from e


class ArrowTable:
    """A table directory (or an in-memory `pa.Table`) with the accessors the pipeline needs."""

    def __init__(self, table: pa.Table, source: str | os.PathLike = "<memory>") -> None:
        self.table, self.source = table, str(source)

    @classmethod
    def open(cls, table_dir: str | os.PathLike) -> ArrowTable:
        """All `*.arrow` shards of `table_dir`, in name order, as one memory-mapped table."""
        files = sorted(Path(table_dir).glob("*.arrow"))
        if not files:
            raise DataError(table_dir, None, None, "no Arrow shards (*.arrow) in this directory")
        return cls.open_files(files, table_dir)

    @classmethod
    def open_files(
        cls, files: Sequence[str | os.PathLike], source: str | os.PathLike | None = None
    ) -> ArrowTable:
        """The given shard files, in order, as one memory-mapped table."""
        tables = [read_shard(f) for f in files]
        return cls(pa.concat_tables(tables), source or (files[0] if files else "<none>"))

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def numpy(self, column: str) -> np.ndarray:
        """A numeric column as one NumPy array (a copy of that column only)."""
        return self.table.column(column).to_numpy()

    def take(self, column: str, rows: Sequence[int] | np.ndarray) -> list:
        """Python values of `column` at `rows` (any order, repeats allowed).

        Each row is read from its own chunk (a record batch of one shard): `ChunkedArray.take`
        would first concatenate the whole column, i.e. copy a corpus's text for ten rows."""
        rows = np.asarray(rows, dtype=np.int64)
        col = self.table.column(column)
        starts = self._chunk_starts(column)
        which = np.searchsorted(starts, rows, side="right") - 1
        out: list = [None] * len(rows)
        for c in np.unique(which).tolist():
            sel = np.flatnonzero(which == c)
            values = col.chunk(c).take(pa.array(rows[sel] - starts[c])).to_pylist()
            for i, value in zip(sel.tolist(), values):
                out[i] = value
        return out

    def _chunk_starts(self, column: str) -> np.ndarray:
        """First row of each chunk of `column` (cached)."""
        cache = self.__dict__.setdefault("_starts", {})
        if column not in cache:
            lengths = [len(c) for c in self.table.column(column).chunks]
            cache[column] = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        return cache[column]

    def slice(self, column: str, start: int, end: int) -> list:
        """Python values of `column` for rows [start, end)."""
        return self.table.column(column).slice(start, end - start).to_pylist()

    def iter_rows(self, columns: Sequence[str], rows: int = 50_000) -> Iterator[dict[str, Any]]:
        """Row dicts of `columns`, streamed (for the few steps that need whole passages)."""
        for _, part in self.iter_slices(rows):
            values = [part.column(c).to_pylist() for c in columns]
            for row in zip(*values):
                yield dict(zip(columns, row))

    def iter_slices(self, rows: int) -> Iterator[tuple[int, pa.Table]]:
        """(start row, table slice of at most `rows` rows), in order."""
        for start in range(0, len(self), rows):
            yield start, self.table.slice(start, rows)


def table_from_jsonl(
    units_path: str | os.PathLike, passage_row_of: dict[str, int] | None = None
) -> ArrowTable:
    """A units JSONL file (`{"id", "text"[, "passage_id", "title"]}`) as an in-memory table, for
    unit files made outside the units stage (a standalone file to encode), not at scale. With
    `passage_row_of` every unit must name a known passage (`passage_row` filled); without it,
    `passage_row` is -1 and the rows' `title` is kept."""
    cols: dict[str, list] = {f.name: [] for f in UNIT_SCHEMA}
    cols["title"] = []
    first_line: dict[str, int] = {}
    required = ("id", "passage_id", "text") if passage_row_of is not None else ("id",)
    for lineno, u in numbered_jsonl(units_path, required=("text",), nonempty=required):
        if not isinstance(u["text"], str):
            raise DataError(units_path, lineno, "text", "must be a string")
        uid = str(u["id"])
        if uid in first_line:
            why = f"duplicate id {uid!r} (first on row {first_line[uid]})"
            raise DataError(units_path, lineno, "id", why)
        first_line[uid] = lineno
        row = -1
        if passage_row_of is not None:
            if u["passage_id"] not in passage_row_of:
                why = f"unknown passage {u['passage_id']!r}"
                raise DataError(units_path, lineno, "passage_id", why)
            row = passage_row_of[u["passage_id"]]
        cols["id"].append(uid)
        cols["passage_id"].append(str(u.get("passage_id") or uid))
        cols["passage_row"].append(row)
        cols["text"].append(u["text"])
        cols["words"].append(len(u["text"].split()))
        cols["title"].append(str(u.get("title") or ""))
    schema = UNIT_SCHEMA.append(pa.field("title", pa.string()))
    return ArrowTable(pa.table(cols, schema=schema), units_path)
