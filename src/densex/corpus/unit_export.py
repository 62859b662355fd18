"""The units stage's JSONL files, exported from its Arrow shards (the interchange format).

`<granularity>.jsonl` rows are `{"id", "passage_id", "title", "text"}` (the title taken from
the unit's passage row), `passages.jsonl` rows `{"id", "title", "section", "text"}`. Both are
streamed shard by shard and written atomically; each shard is mapped only while it is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from densex.corpus.columnar import ArrowTable
from densex.utils.io import atomic_open, jsonl_line

__all__ = ["export_passages_jsonl", "export_units_jsonl"]

EXPORT_ROWS = 50_000  # rows per batch when writing the JSONL files from the shards


def export_units_jsonl(out: Path, granularity: str, passages: ArrowTable) -> dict[str, Any]:
    """`<granularity>.jsonl` (`{"id", "passage_id", "title", "text"}`) from its Arrow shards,
    streamed; returns `{count, avg_words}`."""
    n, words = 0, 0
    with atomic_open(out / f"{granularity}.jsonl") as f:
        for part in _slices_shard_by_shard(out / "arrow" / granularity):
            rows = part.column("passage_row").to_numpy()
            titles = passages.take("title", rows)
            for uid, pid, title, text in zip(
                part.column("id").to_pylist(),
                part.column("passage_id").to_pylist(),
                titles,
                part.column("text").to_pylist(),
            ):
                f.write(jsonl_line({"id": uid, "passage_id": pid, "title": title, "text": text}))
            n += part.num_rows
            words += int(part.column("words").to_numpy().sum())
    return {"count": n, "avg_words": round(words / n, 2) if n else 0.0}


def _slices_shard_by_shard(table_dir: Path) -> Iterator[Any]:
    """Slices of a table's shards, each shard mapped only while it is read (its pages leave
    RSS after, so exporting a 257M-unit table does not look like 257M units of memory)."""
    for shard in sorted(table_dir.glob("*.arrow")):
        for _, part in ArrowTable.open_files([shard]).iter_slices(EXPORT_ROWS):
            yield part


def export_passages_jsonl(out: Path) -> None:
    """`passages.jsonl` from the `arrow/passages` shards of the units directory `out`."""
    with atomic_open(out / "passages.jsonl") as f:
        for part in _slices_shard_by_shard(out / "arrow" / "passages"):
            cols = [part.column(c).to_pylist() for c in ("id", "title", "section", "text")]
            for pid, title, section, text in zip(*cols):
                row = {"id": pid, "title": title, "section": section, "text": text}
                f.write(jsonl_line(row))
