"""Preflight checks of a job's input files, per config group: the corpus (index / evaluate), the
dataset's questions and gold passages (evaluate) and the training pairs (train).

Contract: each input is read through the reader its stage will call, chosen by the same
dispatch with the same format, column and id settings and the same `on_error` policy
(`corpus.sources.source_rows` / `first_unit_rows` for the corpus, `data.questions` and
`data.qrels` for the dataset), on its first rows only (questions are loaded in full: they are
small and their count sizes the outputs). So every format a stage accepts passes preflight,
there is no second list of required fields, and a bad input fails with the reader's own
located message (`FILE:LINE: ...`) followed by the config key in parentheses, as a
`PreflightError`. The corpus and training checks return `{config key: path or source}`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from densex.corpus.collection_rows import source_format
from densex.corpus.readers import Skips
from densex.corpus.sources import first_unit_rows, source_kind, source_rows, unit_sources
from densex.corpus.spec import CorpusSpec, TitleFilterSpec
from densex.corpus.titles import read_titles
from densex.corpus.units_key import wanted_granularities
from densex.data.qrels import load_dataset_qrels
from densex.data.questions import has_answer_strings, load_dataset_questions
from densex.pipelines.edge import corpus_spec, dataset_spec
from densex.pipelines.preflight.hub import PreflightError, first_line, hf_dataset_source
from densex.pipelines.train.sources import pair_sources
from densex.propositionizer.pairs import load_hf_pairs, load_jsonl_pairs, load_squad_open_pairs
from densex.propositionizer.sources import PairSource, first_articles, split_sources
from densex.utils.io import DataError, numbered_jsonl


@contextmanager
def reader_errors(key: str, label: str) -> Iterator[None]:
    """A stage reader's `DataError` as a `PreflightError`: the reader's located message, then
    the config `key` in parentheses; a ValueError / OSError of a library below it as
    `label: <its first line>`."""
    try:
        yield
    except DataError as e:
        raise PreflightError(f"{e} ({key})") from None
    except (ValueError, OSError) as e:
        raise PreflightError(f"{label}: {first_line(e)}") from None


def first_rows(rows: Iterable[Any], key: str, where: Any, n: int = 1) -> list[Any]:
    """The first `n` items a stage reader yields; its errors become a `PreflightError`
    (`reader_errors`: the reader's message then `key`); a reader that yields nothing is one
    too."""
    out: list[Any] = []
    with reader_errors(key, f"{key}={where}"):
        for row in rows:
            out.append(row)
            if len(out) >= n:
                break
    if not out:
        raise PreflightError(f"{where}: no records ({key})")
    return out


def _hub_only(source: dict[str, Any], key: str) -> bool:
    """A collection source that is a hub id (streamed by the stage: checked in the cache only)."""
    try:
        return source_format(source) == "hf_hub"
    except (DataError, ValueError) as e:
        raise PreflightError(f"{e} ({key})") from None


def _check_passages(corpus: CorpusSpec, skips: Skips) -> dict[str, str]:
    """The passages source (a collection, a BEIR or densex passages file, or the documents):
    its first rows through `source_rows`, the stage's dispatch."""
    kind = source_kind(corpus)
    if kind == "collection":
        passage = corpus.sources["passage"]
        key, src = "corpus.sources.passage", str(passage.get("path"))
        if _hub_only(passage, key):
            return {key: hf_dataset_source(src, f"{key}.path")}
    elif kind == "documents":
        key, src = "corpus.documents", corpus.documents
        if not src:
            raise PreflightError(
                f"corpus {corpus.name!r}: set corpus.passages=FILE or corpus.documents=..."
            )
        local = Path(os.path.expanduser(str(src))).exists()
        if str(corpus.documents_format) == "hf" and not local:
            return {key: hf_dataset_source(str(src), key)}
    else:
        key, src = "corpus.passages", corpus.passages
    # the reader's first rows; the title filter's lists are `check_titles`' (their own keys)
    first_rows(source_rows(replace(corpus, titles=TitleFilterSpec()), skips), key, src)
    return {key: str(src)}


def _check_units(granularity: str, source: Any, skips: Skips) -> dict[str, str]:
    """A unit table's input (`unit_sources`): a collection's node or the propositions file,
    its first rows through `first_unit_rows`, the stage's reader."""
    if isinstance(source, str):
        key, src = "corpus.propositions", source
    else:
        key, src = f"corpus.sources.{granularity}", str(source.get("path"))
        if _hub_only(source, key):
            return {key: hf_dataset_source(src, f"{key}.path")}
    first_rows(first_unit_rows(source, skips), key, src)
    return {key: src}


def check_titles(spec: TitleFilterSpec, label: str) -> dict[str, str]:
    """A title filter's lists (`corpus.titles`, `dataset.titles`: small files, read whole by
    the stage's reader, `corpus.titles.read_titles`); a missing file or a bad entry is a
    `PreflightError` naming the file and the key. Returns `{key: file}` for those in files."""
    out: dict[str, str] = {}
    for side in ("include", "exclude"):
        value, key = getattr(spec, side), f"{label}.{side}"
        try:
            read_titles(value, key)
        except DataError as e:
            raise PreflightError(str(e)) from None
        if value is not None and not isinstance(value, (list, tuple)):
            out[key] = str(value)
    return out


def check_corpus(cfg: DictConfig, entry: str) -> dict[str, str]:
    """The corpus inputs of index/evaluate (collections, passages or documents, propositions),
    each read on its first rows by the units stage's reader with the corpus's `on_error`."""
    corpus = corpus_spec(cfg.corpus)
    skips = Skips(str(corpus.on_error or "raise"))
    wanted = list(wanted_granularities(corpus))
    out = _check_passages(corpus, skips)
    out.update(check_titles(corpus.titles, "corpus.titles"))
    from_file = str((cfg.get("propositionizer") or {}).get("type", "file")) == "file"
    units = unit_sources(corpus, wanted)
    for g, source in units.items():
        if from_file or not isinstance(source, str):  # a model propositionizer writes its own
            out.update(_check_units(g, source, skips))
    wants_props = cfg.granularity.name == "proposition" or (
        entry == "index" and cfg.get("stage") in ("propositions",)
    )
    if wants_props and from_file and "proposition" not in units:
        raise PreflightError(
            "granularity=proposition needs propositions: corpus.propositions=FILE (JSONL"
            ' {"id": passage_id, "propositions": [...]}) or a model propositionizer'
            " (propositionizer=model propositionizer.model=/path/or/hub-id)"
        )
    return out


def check_dataset(dataset: DictConfig, limit: Any = None) -> int:
    """Load the dataset's questions (small files) with the stage's reader and policy, read its
    gold passages (`qrels`) when it has any, and return how many questions there are."""
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
    with reader_errors("dataset", f"dataset={dataset.get('name')}"):
        spec = dataset_spec(dataset)
    check_titles(spec.titles, "dataset.titles")
    filtered = spec.titles.include is not None or spec.titles.exclude is not None
    if filtered and not Path(os.path.expanduser(str(spec.articles))).is_file():
        raise PreflightError(
            f"dataset.articles={spec.articles}: file not found (the SQuAD JSON that maps"
            f" dataset={spec.name}'s questions to the articles dataset.titles keeps)"
        )
    with reader_errors("dataset", f"dataset={dataset.get('name')}"):
        questions = load_dataset_questions(
            spec, limit=int(limit) if limit else None, skips=Skips(str(spec.on_error or "raise"))
        )
        load_dataset_qrels(spec, [])  # SQuAD qrels: the file is read, no passage matched
        has_answer_strings(questions, spec)  # answers or qrels: some metric is defined
    if not questions:
        raise PreflightError(f"dataset.path={path}: no questions")
    return len(questions)


def _pairs(load: Any, key: str, *args: Any) -> None:
    """The training pairs read by the data module's own reader (`propositionizer.pairs`: small
    files, read whole); its `DataError` becomes a `PreflightError` naming `key`."""
    try:
        pairs = load(*args)
    except DataError as e:
        raise PreflightError(f"{e} ({key})") from None
    if not pairs:
        raise PreflightError(f"{args[0]}: no training pairs ({key})")


def _typed_sources(data: DictConfig) -> list[PairSource]:
    """`data.sources` as the data module gets them (`pair_sources`), with the module's rule:
    some sources, and no top-level `data.val_fraction` / `data.test_fraction`."""
    try:
        sources = pair_sources(data.get("sources"))
    except ValueError as e:
        raise PreflightError(str(e)) from None
    if not sources:
        raise PreflightError("data.format=sources: set data.sources (conf/data/squad-sources.yaml)")
    for key in ("val_fraction", "test_fraction"):
        if data.get(key) is not None:
            raise PreflightError(
                f"data.{key}={data.get(key)}: null with data.format=sources (each source has"
                f" its own: data.sources[i].{key})"
            )
    return sources


def _source_pairs(i: int, source: PairSource) -> list[dict[str, Any]]:
    """Source `i`'s pairs read whole by the module's reader (`load_squad_open_pairs`, its
    `partial`); a missing file, a bad row or no pair is a `PreflightError`: the reader's
    located message, then the key of the file (`data.sources[i].propositions`)."""
    keys = {str(source.passages): f"data.sources[{i}].passages",
            str(source.propositions): f"data.sources[{i}].propositions"}  # fmt: skip
    try:
        pairs = load_squad_open_pairs(source.passages, source.propositions, source.partial)
    except DataError as e:
        raise PreflightError(f"{e} ({keys.get(e.path, f'data.sources[{i}]')})") from None
    if not pairs:
        raise PreflightError(f"{source.propositions}: no training pairs (data.sources[{i}])")
    return pairs


def _source_questions(i: int, source: PairSource) -> dict[str, str]:
    """Source `i`'s SQuAD JSON (must exist) and questions (first row, as retrieval validation
    reads them), when set; `{key: file}`."""
    out: dict[str, str] = {}
    if source.squad_json:
        key, path = f"data.sources[{i}].squad_json", str(source.squad_json)
        if not Path(os.path.expanduser(path)).is_file():
            raise PreflightError(f"{path}: file not found ({key})")
        out[key] = path
    if source.questions:
        key, path = f"data.sources[{i}].questions", str(source.questions)
        first_rows(numbered_jsonl(path), key, path)
        out[key] = path
    return out


def check_sources(data: DictConfig) -> dict[str, str]:
    """`data.format=sources`: each source's files (`_source_pairs`, `_source_questions`), then
    the split the module makes (`sources.split_sources`: no article in two sources, training
    articles left, `data.train_articles` at most their number). Returns `{key: file}`."""
    out: dict[str, str] = {}
    read = []
    for i, source in enumerate(_typed_sources(data)):
        read.append((source, _source_pairs(i, source)))
        out[f"data.sources[{i}].passages"] = str(source.passages)
        out[f"data.sources[{i}].propositions"] = str(source.propositions)
        out.update(_source_questions(i, source))
    try:
        train = split_sources(read).train
        if data.get("train_articles"):
            first_articles(train, int(data.train_articles))
    except ValueError as e:
        raise PreflightError(str(e)) from None
    if not train:
        raise PreflightError("data.sources: no training articles (every one is held out)")
    return out


def check_train_data(data: DictConfig) -> dict[str, str]:
    """Training pairs (squad-open passages + propositions, the `data.sources` pairs of files,
    or a JSONL/HF `data.path`), read by the reader `propositionizer.data` calls for
    `data.format`."""
    fmt = str(data.get("format", "squad-open"))
    out: dict[str, str] = {}
    if fmt == "sources":
        out = check_sources(data)
    elif fmt == "squad-open":
        _pairs(load_squad_open_pairs, "data.passages, data.propositions", data.passages,
               data.propositions)  # fmt: skip
        out = {"data.passages": str(data.passages), "data.propositions": str(data.propositions)}
    elif fmt == "jsonl":
        for key in ("path", "val_path"):
            if data.get(key) not in (None, "???"):
                _pairs(load_jsonl_pairs, f"data.{key}", data[key])
                out[f"data.{key}"] = str(data[key])
        if "data.path" not in out:
            raise PreflightError("data=jsonl: set data.path=FILE (JSONL pairs)")
    elif fmt == "hf":
        if data.get("path") in (None, "???"):
            raise PreflightError("data=hf: set data.path=DIR (a datasets.save_to_disk dir)")
        out["data.path"] = str(data.path)
        if hf_dataset_source(str(data.path), "data.path") == "local":
            _pairs(load_hf_pairs, "data.path", str(data.path), data.get("split") or "train")
    return out
