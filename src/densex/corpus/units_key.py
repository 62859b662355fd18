"""What a units directory depends on: the corpus's unit settings (`CorpusSpec`) and their key.

`units_key` hashes everything the unit files depend on (inputs, the articles kept by
`corpus.titles`, segmentation, sentencizer, format version); `units_dir_for` is the cache
directory index and evaluate share; `input_record` is the manifest's record of the inputs. A
missing input file is a `DataError`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from densex.corpus.segment import sentencizer_id
from densex.corpus.spec import GRANULARITIES, CorpusSpec
from densex.corpus.titles import TitleFilter
from densex.utils.cache import artifact_dir, content_key, hash_file
from densex.utils.io import DataError

__all__ = [
    "DEFAULT_SHARD_ROWS",
    "DEFAULT_SHARD_UNITS",
    "UNITS_FORMAT_VERSION",
    "input_record",
    "segmentation_settings",
    "units_dir_for",
    "units_key",
    "wanted_granularities",
]

# Bump when the unit files' content or layout changes, so old caches are not reused.
UNITS_FORMAT_VERSION = 2  # 2: Arrow shards beside the JSONL files
DEFAULT_SHARD_ROWS = CorpusSpec.shard_rows  # source rows (passages or documents) per shard
DEFAULT_SHARD_UNITS = CorpusSpec.shard_units  # units per proposition shard


def segmentation_settings(corpus: CorpusSpec) -> dict[str, Any]:
    """`corpus.segmentation` as plain values (`spacy_model: null` or "" means spaCy's
    rule-based sentencizer)."""
    return dataclasses.asdict(corpus.segmentation)


def _hash_input(path: Any) -> str:
    if not Path(os.path.expanduser(str(path))).is_file():
        raise DataError(path, None, None, "file not found")
    return hash_file(os.path.expanduser(str(path)))


def _source_fingerprint(src: Any, corpus: CorpusSpec) -> dict[str, Any]:
    """What identifies a document source: a file's hash, a saved dataset's fingerprint, or the
    hub id/config/split/revision."""
    fingerprint = getattr(src, "_fingerprint", None)  # an in-memory `datasets.Dataset`
    if fingerprint is not None:
        return {"fingerprints": [fingerprint]}
    path = Path(os.path.expanduser(str(src)))
    if path.is_file():
        return {"sha256": hash_file(path)}
    if path.is_dir():
        states = sorted(path.rglob("state.json"))
        return {"fingerprints": [json.loads(p.read_text()).get("_fingerprint") for p in states]}
    keys = ("hf_name", "split", "revision", "limit")
    return {"hf": str(src), **{k: getattr(corpus, k) for k in keys}}


def _collection_fingerprint(source: dict[str, Any]) -> dict[str, Any]:
    """A collection source's identity (`source`: its plain settings in `CorpusSpec.sources`):
    the settings plus, for a local copy, each file's name, size and mtime (not a content hash:
    FactoidWiki is ~100 GB), else the hub id."""
    settings = {k: v for k, v in source.items() if k != "path"}
    path = Path(os.path.expanduser(str(source.get("path"))))
    if path.is_file():
        return {**settings, "sha256": hash_file(path)}
    if path.is_dir():
        files = sorted(f for f in path.rglob("*") if f.is_file())
        stat = [(str(f.relative_to(path)), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
        return {**settings, "files": stat}
    return {**settings, "hf": str(source.get("path"))}


def units_key(corpus: CorpusSpec, propositions_path: str | os.PathLike | None = None) -> str:
    """Content key of everything the unit files depend on (inputs, the title filter's titles,
    segmentation, sentencizer)."""
    seg = segmentation_settings(corpus)
    parts: dict[str, Any] = {
        "version": UNITS_FORMAT_VERSION,
        "sentencizer": sentencizer_id(seg["spacy_model"]),
        "on_error": corpus.on_error or "raise",
        "granularities": list(wanted_granularities(corpus)),
        "shard_rows": int(corpus.shard_rows or DEFAULT_SHARD_ROWS),
    }
    sources = dict(corpus.sources or {})
    if sources:  # ready-made collections (FactoidWiki)
        parts["sources"] = {g: _collection_fingerprint(s) for g, s in sources.items() if s}
    elif corpus.passages:
        parts["passages"] = _hash_input(corpus.passages)
        if corpus.passages_format:  # set only for non-default formats (beir)
            parts["passages_format"] = corpus.passages_format
    else:
        reader_keys = ("documents_format", "title_column", "text_column", "id_column",
                       "section_column", "paragraph_separator")  # fmt: skip
        parts["documents"] = _source_fingerprint(corpus.documents, corpus)
        parts["reader"] = {k: getattr(corpus, k) for k in reader_keys}
        parts["segmentation"] = {k: seg[k] for k in ("max_words", "min_tail_words")}
    props = propositions_path or corpus.propositions
    parts["propositions"] = _hash_input(props) if props else None
    titles = TitleFilter.from_spec(corpus.titles, "corpus.titles").key()
    if titles is not None:  # keyed only when set: the keys of unfiltered corpora stay
        parts["titles"] = titles
    return content_key(**parts)


def units_dir_for(
    corpus: CorpusSpec,
    cache_dir: str | os.PathLike,
    propositions_path: str | os.PathLike | None = None,
) -> Path:
    """`<cache_dir>/units/<corpus name>/<units_key>`: the directory index and evaluate share."""
    return artifact_dir(cache_dir, "units", str(corpus.name or "corpus"),
                        key=units_key(corpus, propositions_path))  # fmt: skip


def wanted_granularities(corpus: CorpusSpec) -> tuple[str, ...]:
    """The unit granularities to build (`corpus.granularities`, default all three)."""
    wanted = tuple(corpus.granularities or GRANULARITIES)
    unknown = sorted(set(wanted) - set(GRANULARITIES))
    if unknown:
        raise ValueError(f"corpus.granularities: unknown {unknown} (choose from {GRANULARITIES})")
    return wanted


def input_record(
    corpus: CorpusSpec, propositions_path: str | os.PathLike | None, with_props: bool
) -> dict[str, Any]:
    """The manifest's record of what the units were built from."""
    sources = dict(corpus.sources or {})
    if sources:
        inputs = {g: _collection_fingerprint(s) for g, s in sources.items() if s}
    else:
        src = corpus.passages or corpus.documents
        kind = "passages" if corpus.passages else "documents"
        inputs = {kind: {"path": str(src), **_source_fingerprint(src, corpus)}}
    props = propositions_path or corpus.propositions
    if props and with_props and not sources:
        inputs["propositions"] = {"path": str(props), "sha256": hash_file(props)}
    if (titles := TitleFilter.from_spec(corpus.titles, "corpus.titles").key()) is not None:
        inputs["titles"] = titles
    return inputs
