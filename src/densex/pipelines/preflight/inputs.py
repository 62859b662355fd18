"""Preflight checks of a job's input files, per config group: the corpus (index / evaluate), the
dataset's questions (evaluate) and the training pairs (train).

Contract: each check reads only what proves the input usable (the first record of a JSONL
file, a SQuAD file's top level, a hub dataset's cache entry; questions are loaded in full:
they are small and their count sizes the outputs) and raises a `PreflightError` naming the
config key and the fix; the corpus and training checks return `{config key: path or source}`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from densex.data.questions import load_dataset_questions
from densex.pipelines.preflight.hub import PreflightError, first_line, hf_dataset_source
from densex.utils.io import DataError, check_fields


def first_record(path: str | os.PathLike, key: str, nonempty: Sequence[str] = ()) -> dict:
    """The first JSON object of a JSONL file, checked; a `PreflightError` naming `key` if the
    file is missing, empty or its first record does not parse."""
    p = Path(os.path.expanduser(str(path)))
    if not p.exists():
        raise PreflightError(f"{key}={path}: file not found")
    if p.is_dir():
        raise PreflightError(f"{key}={path}: a directory, expected a JSONL file")
    with p.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise PreflightError(
                    f"{key}: {p}:{lineno}: invalid JSON ({e.msg} at column {e.colno})"
                ) from None
            if not isinstance(row, dict):
                raise PreflightError(f"{key}: {p}:{lineno}: expected a JSON object")
            try:
                check_fields(row, p, lineno, nonempty=nonempty)
            except DataError as e:
                raise PreflightError(f"{key}: {e}") from None
            return row
    raise PreflightError(f"{key}={path}: empty file")


def _squad_json(path: str, key: str) -> None:
    p = Path(os.path.expanduser(path))
    if not p.exists():
        raise PreflightError(f"{key}={path}: file not found")
    try:
        with p.open(encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise PreflightError(f"{key}: {p}:{e.lineno}: invalid JSON ({e.msg})") from None
    if not (isinstance(data, dict) and isinstance(data.get("data"), list) and data["data"]):
        raise PreflightError(f"{key}: {p}: not SQuAD JSON (expected a non-empty 'data' list)")


def _collection(src: str, granularity: str) -> str:
    """A collection source is a local file or directory, or a hub dataset in the HF cache."""
    if Path(os.path.expanduser(src)).exists():
        return src
    return hf_dataset_source(src, f"corpus.sources.{granularity}.path")


def _check_documents(corpus: DictConfig) -> str:
    """The corpus's `documents` (squad | jsonl | hf); returns their path or id."""
    src = corpus.get("documents")
    fmt = str(corpus.documents_format)
    if not src:
        raise PreflightError(
            f"corpus {corpus.get('name')!r}: set corpus.passages=FILE or corpus.documents=..."
        )
    if fmt == "squad":
        _squad_json(str(src), "corpus.documents")
    elif fmt == "jsonl":
        first_record(src, "corpus.documents", nonempty=(corpus.text_column,))
    elif fmt == "hf":
        hf_dataset_source(str(src), "corpus.documents")
    return str(src)


def check_corpus(cfg: DictConfig, entry: str) -> dict[str, str]:
    """The corpus inputs of index/evaluate: passages (or documents) and propositions."""
    corpus = cfg.corpus
    out: dict[str, str] = {}
    sources = corpus.get("sources") or {}
    if sources:  # ready-made collections (FactoidWiki): each local file/dir or cached hub id
        wanted = list(corpus.granularities)
        for g, source in sources.items():
            if source and g in wanted:
                out[f"corpus.sources.{g}"] = _collection(str(source.get("path")), g)
        return out
    if corpus.get("passages"):
        first_record(corpus.passages, "corpus.passages", nonempty=("id", "text"))
        out["corpus.passages"] = str(corpus.passages)
    else:
        out["corpus.documents"] = _check_documents(corpus)
    ptype = str((cfg.get("propositionizer") or {}).get("type", "file"))
    wants_props = cfg.granularity.name == "proposition" or (
        entry == "index" and cfg.get("stage") in ("propositions",)
    )
    if corpus.get("propositions") and ptype == "file":
        first_record(corpus.propositions, "corpus.propositions", nonempty=("id", "propositions"))
        out["corpus.propositions"] = str(corpus.propositions)
    elif wants_props and ptype == "file":
        raise PreflightError(
            "granularity=proposition needs propositions: corpus.propositions=FILE (JSONL"
            ' {"id": passage_id, "propositions": [...]}) or a model propositionizer'
            " (propositionizer=model propositionizer.model=/path/or/hub-id)"
        )
    return out


def check_dataset(dataset: DictConfig, limit: Any = None) -> int:
    """Load the dataset's questions (small files) and return how many there are."""
    fmt = str(dataset.format)
    path = dataset.get("path")
    if fmt == "hf":
        hf_dataset_source(str(dataset.get("hf_name") or path), "dataset.hf_name")
    elif path in (None, "", "???"):
        raise PreflightError(f"dataset={dataset.get('name')}: set dataset.path=FILE")
    elif not Path(os.path.expanduser(str(path))).exists():
        raise PreflightError(
            f"dataset.path={path}: file not found (dataset={dataset.get('name')}, format {fmt})"
        )
    try:
        questions = load_dataset_questions(dataset, limit=int(limit) if limit else None)
    except DataError as e:
        raise PreflightError(f"dataset.path: {e}") from None
    except (OSError, ValueError) as e:
        raise PreflightError(f"dataset={dataset.get('name')}: {first_line(e)}") from None
    if not questions:
        raise PreflightError(f"dataset.path={path}: no questions")
    return len(questions)


def check_train_data(data: DictConfig) -> dict[str, str]:
    """Training pairs: squad-open passages + propositions, or a JSONL/HF `data.path`."""
    fmt = str(data.get("format", "squad-open"))
    out: dict[str, str] = {}
    if fmt == "squad-open":
        first_record(data.passages, "data.passages", nonempty=("id", "text"))
        first_record(data.propositions, "data.propositions", nonempty=("id", "propositions"))
        out = {"data.passages": str(data.passages), "data.propositions": str(data.propositions)}
    elif fmt == "jsonl":
        for key in ("path", "val_path"):
            if data.get(key) not in (None, "???"):
                first_record(data[key], f"data.{key}")
                out[f"data.{key}"] = str(data[key])
        if "data.path" not in out:
            raise PreflightError("data=jsonl: set data.path=FILE (JSONL pairs)")
    elif fmt == "hf":
        if data.get("path") in (None, "???"):
            raise PreflightError("data=hf: set data.path=DIR (a datasets.save_to_disk dir)")
        hf_dataset_source(str(data.path), "data.path")
        out["data.path"] = str(data.path)
    return out
