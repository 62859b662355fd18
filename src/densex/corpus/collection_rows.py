"""A collection source's raw rows: where they are (`path`, `format`) and how they are read.

`source_format` tells a JSONL file or directory (`jsonl`), a `datasets.save_to_disk`
directory (`hf_disk`) and a hub id (`hf_hub`) apart; `source_rows` yields every row as
`((source, line or None, row), row index)`, `limit` applied. Nothing holds a whole file or
dataset in memory: JSONL (plain, `.gz`, `.bz2`) is read line by line, saved datasets are
memory-mapped Arrow read a batch at a time, hub datasets are opened with `streaming=True`. A
line that is not a JSON object (or not UTF-8) is a `DataError(file, line)` for `Skips`. The source keys are
listed in `corpus.collections`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from densex.corpus.readers import Skips
from densex.utils.io import DataError, numbered_jsonl
from densex.utils.records import Record

__all__ = ["Row", "source_files", "source_format", "source_rows", "source_setting"]

_HF_MARKERS = ("dataset_info.json", "dataset_dict.json", "state.json")
_JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".jsonl.bz2")

Row = tuple[str, int | None, Record]  # (source, line or None, row)


def source_setting(cfg: dict[str, Any] | None, key: str, default: Any = None) -> Any:
    """`cfg[key]`, or `default` when the key is missing or null (or `cfg` is None)."""
    value = cfg.get(key, default) if cfg is not None else default
    return default if value is None and default is not None else value


def _expand(path: Any) -> Path:
    return Path(os.path.expanduser(os.path.expandvars(str(path))))


def source_format(source_cfg: dict[str, Any]) -> str:
    """`jsonl` (a file or a directory of JSONL files), `hf_disk` (a `save_to_disk` dir) or
    `hf_hub` (anything else: a hub id), from `format` and `path`."""
    path = source_setting(source_cfg, "path")
    if path in (None, "", "???"):
        raise ValueError("collection source: set `path` (file, directory or hub id)")
    fmt = str(source_setting(source_cfg, "format", "auto"))
    local = _expand(path)
    is_hf_dir = local.is_dir() and any((local / m).exists() for m in _HF_MARKERS)
    if fmt == "auto":
        if is_hf_dir:
            return "hf_disk"
        return "jsonl" if local.exists() else "hf_hub"
    if fmt == "jsonl":
        if not local.exists():
            raise DataError(local, None, None, "file or directory not found")
        return "jsonl"
    if fmt == "hf":
        return "hf_disk" if is_hf_dir else "hf_hub"
    raise ValueError(f"collection format must be auto | jsonl | hf, got {fmt!r}")


def source_files(path: str | os.PathLike) -> list[Path]:
    """The JSONL files of a source path: the file itself, or a directory's `*.jsonl`,
    `*.jsonl.gz`, `*.json`(`.gz`) files, recursively, in sorted order (pyserini collections,
    hub snapshots)."""
    root = _expand(path)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise DataError(root, None, None, "file or directory not found")
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and p.name.endswith(_JSONL_SUFFIXES) and p.name not in _HF_MARKERS
    )
    if not files:
        raise DataError(root, None, None, f"no {' / '.join(_JSONL_SUFFIXES)} files")
    return files


def _jsonl_rows(path: Path, skips: Skips) -> Iterator[Row]:
    """(file, line, object) per JSON line, streamed (compressed files too), read by the one
    located reader of untrusted bytes (`utils.io.numbered_jsonl`)."""
    for lineno, row in numbered_jsonl(path, on_error=skips):
        yield str(path), lineno, row


def _hf_rows(source_cfg: dict[str, Any], fmt: str) -> Iterator[Row]:
    """Rows of a saved (memory-mapped, read a batch at a time) or streamed hub dataset,
    located as `<source>[split]` + row index."""
    import datasets  # ~1 s to import: only hub and save_to_disk sources need it

    path = str(source_setting(source_cfg, "path"))
    split = source_setting(source_cfg, "split", "train")
    if fmt == "hf_disk":
        ds = datasets.load_from_disk(str(_expand(path)))
    else:
        kwargs: dict[str, Any] = {"streaming": True}
        if source_setting(source_cfg, "revision"):
            kwargs["revision"] = str(source_cfg["revision"])
        ds = datasets.load_dataset(
            path, source_setting(source_cfg, "hf_name"), split=split, **kwargs
        )
    if isinstance(ds, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        if split not in ds:
            raise DataError(path, None, "split", f"no split {split!r} (splits: {list(ds)})")
        ds = ds[split]
    source = f"{path}[{split}]"
    for batch in ds.iter(batch_size=1024):
        columns = list(batch)
        n = len(batch[columns[0]]) if columns else 0
        for i in range(n):
            yield source, None, {c: batch[c][i] for c in columns}


def source_rows(source_cfg: dict[str, Any], skips: Skips) -> Iterator[tuple[Row, int]]:
    """(row, row index) over every row of the source, `limit` applied."""
    fmt = source_format(source_cfg)
    if fmt == "jsonl":
        rows: Iterator[Row] = itertools.chain.from_iterable(
            _jsonl_rows(p, skips) for p in source_files(source_cfg["path"])
        )
    else:
        rows = _hf_rows(source_cfg, fmt)
    limit = source_setting(source_cfg, "limit")
    numbered = zip(rows, itertools.count())
    return itertools.islice(numbered, int(limit)) if limit is not None else numbered
