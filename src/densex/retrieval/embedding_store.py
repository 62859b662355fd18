"""A complete embeddings directory, opened: `EmbeddingStore` and `open_embeddings`.

The directory `encode.encode_units_to_dir` writes holds shards `emb-<start>-<end>.npy` (rows
of fixed global ranges) with their `ids-<start>-<end>.json`, and `manifest.json` (written
last: its `complete` flag, dim, dtype, count and each shard's size + content hash). Opening
verifies every shard first; a damaged store is reported and its damaged files removed, so that
encoding into the same directory re-encodes exactly those shards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from densex.utils.integrity import DamagedArtifact, handle_damage, verify_files
from densex.utils.io import DataError, read_json

__all__ = ["EmbeddingStore", "open_embeddings"]


class EmbeddingStore:
    """A complete embeddings directory: memory-mapped shards, ids and the manifest."""

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root, self.manifest = root, manifest
        self._ids: list[str] | None = None
        self.reused = False  # set by `encode_units_to_dir` when nothing was encoded
        self.encoded_rows = 0  # rows this process encoded into it (`encode_units_to_dir`)

    @classmethod
    def open(cls, root: str | Path) -> EmbeddingStore:
        """Open a complete directory, every shard checked against the manifest's size and
        content hash first (`utils.integrity`); a mismatch raises `DamagedArtifact` with
        `.problems` = [(file, why), ...]."""
        root = Path(root)
        man = read_json(root / "manifest.json")
        if not man.get("complete"):
            raise DataError(root / "manifest.json", None, "complete", "encoding is not complete")
        for sh in man["shards"]:
            for key in ("file", "ids"):
                if not (root / sh[key]).exists():
                    raise DataError(root / sh[key], None, None, "shard listed in manifest missing")
        records = {}
        for sh in man["shards"]:
            records[sh["file"]] = (sh.get("records") or {}).get("file")
            records[sh["ids"]] = (sh.get("records") or {}).get("ids")
        problems = verify_files(root, records)
        if problems:
            path, why = problems[0]
            err = DamagedArtifact(path, None, None, f"damaged embedding shard: {why}")
            err.problems = problems
            raise err
        return cls(root, man)

    @property
    def dim(self) -> int:
        """Embedding dimension."""
        return int(self.manifest["dim"])

    @property
    def dtype(self) -> str:
        """Stored dtype (`float32`, `float16`, ...)."""
        return str(self.manifest["dtype"])

    def __len__(self) -> int:
        return int(self.manifest["count"])

    @property
    def ids(self) -> list[str]:
        """Unit ids in row order (read from the shards on first use)."""
        if self._ids is None:
            ids: list[str] = []
            for sh in self.manifest["shards"]:
                ids.extend(read_json(self.root / sh["ids"]))
            self._ids = ids
        return self._ids

    def shard_arrays(self) -> list[tuple[int, np.ndarray]]:
        """(start row, read-only memmap [rows, dim]) per shard, in row order."""
        return [
            (sh["start"], np.load(self.root / sh["file"], mmap_mode="r"))
            for sh in self.manifest["shards"]
        ]

    def iter_arrays(self, chunk_rows: int = 65536):
        """(start row, block) pieces of at most `chunk_rows` rows, never the whole corpus at once;
        each shard is mapped only while its blocks are read (its pages leave RSS after)."""
        for sh in self.manifest["shards"]:
            arr = np.load(self.root / sh["file"], mmap_mode="r")
            for s in range(0, len(arr), chunk_rows):
                yield sh["start"] + s, arr[s : s + chunk_rows]
            del arr

    @property
    def embeddings(self) -> np.ndarray:
        """All rows: the memmap itself for one shard, an in-memory concatenation otherwise."""
        arrays = [a for _, a in self.shard_arrays()]
        if len(arrays) == 1:
            return arrays[0]
        if not arrays:
            return np.zeros((0, self.dim), dtype=self.dtype)
        return np.concatenate(arrays)


def open_embeddings(out_dir: str | Path) -> EmbeddingStore | None:
    """The verified `EmbeddingStore` in `out_dir`, or None when there is none or it is damaged.

    A damaged store is reported (`cache.on_damaged`), and its manifest and damaged shards are
    removed, so that encoding into the same directory re-encodes exactly those shards.
    """
    out = Path(out_dir)
    if not (out / "manifest.json").exists():
        return None
    try:
        return EmbeddingStore.open(out)
    except DamagedArtifact as e:
        handle_damage(e.problems, "embeddings", f"rebuild: rm -r {out}")
        (out / "manifest.json").unlink(missing_ok=True)
        for path, _ in e.problems:
            path.unlink(missing_ok=True)
        return None
