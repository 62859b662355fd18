"""Which reader reads a corpus config's inputs: the one dispatch the units stage and the
preflight share.

`source_rows(corpus, skips)` streams the rows the units stage cuts into passage shards:
a ready-made collection's passages (`corpus.sources.passage`), a BEIR `corpus.jsonl`
(`passages_format: beir`), a passages JSONL (`passages`), or documents (`documents` +
`documents_format`, with the config's column and id settings) to be segmented; each kept or
dropped by its title (`corpus.titles`: `corpus.titles.filter_rows`).
`unit_sources(corpus)` names the inputs of the other unit tables (a collection's
sentences/propositions, the propositions file) and `first_unit_rows` reads the first rows of
one with the stage's reader. Preflight reads the first rows of each through these functions,
so every format the stage accepts passes it and every error is the reader's own, located.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from densex.corpus.beir import iter_beir_corpus
from densex.corpus.collections import iter_passage_batches, iter_unit_batches
from densex.corpus.documents import read_documents
from densex.corpus.readers import Skips, iter_passages, iter_proposition_rows
from densex.corpus.spec import CorpusSpec
from densex.corpus.titles import TitleFilter, filter_rows
from densex.utils.io import DataError

__all__ = ["SOURCE_KINDS", "first_unit_rows", "source_kind", "source_rows", "unit_sources"]

# what `source_rows` reads, by the config keys that select it (tried in this order)
SOURCE_KINDS = ("collection", "beir", "passages", "documents")


def source_kind(corpus: CorpusSpec) -> str:
    """`collection` | `beir` | `passages` | `documents`: the passages source the corpus names."""
    if ((corpus.sources or {}).get("passage")) is not None:
        return "collection"
    if corpus.passages:
        return "beir" if corpus.passages_format == "beir" else "passages"
    return "documents"


def source_rows(corpus: CorpusSpec, skips: Skips) -> Iterator[dict[str, Any]]:
    """The passages (or, for `documents`, the documents) of a corpus, streamed, by the
    reader its settings select (`source_kind`), those of the articles `corpus.titles` keeps
    (`titles.filter_rows`: an included title no row has is a `DataError` once all are read);
    bad rows go to `skips`."""
    kind = source_kind(corpus)
    rows: Iterator[dict[str, Any]]
    if kind == "collection":
        source = corpus.sources["passage"]
        src = str(source.get("path"))
        batches = iter_passage_batches(source, skips, 10_000)
        rows = _unique((p for batch in batches for p in batch), skips, src)
    elif kind == "beir":  # BEIR corpus.jsonl: a document a passage
        src, rows = str(corpus.passages), iter_beir_corpus(corpus.passages, skips)
    elif kind == "passages":
        src, rows = str(corpus.passages), iter_passages(corpus.passages, skips)
    else:
        src, rows = str(corpus.documents), read_documents(corpus, skips)
    return filter_rows(rows, TitleFilter.from_spec(corpus.titles, "corpus.titles"), src)


def _unique(rows: Iterator[dict], skips: Skips, source: str) -> Iterator[dict]:
    """Passages with an id not seen before (a repeat is a `DataError` for `skips`)."""
    seen: set[str] = set()
    for row in rows:
        if row["id"] in seen:
            skips(DataError(source, None, "id", f"duplicate passage id {row['id']!r}"))
            continue
        seen.add(row["id"])
        yield row


def unit_sources(
    corpus: CorpusSpec, granularities: list[str], propositions: Any = None
) -> dict[str, Any]:
    """`{granularity: source}` for the unit tables read from an input rather than made from
    the passages: a collection's settings (`corpus.sources[g]`) or the propositions file."""
    sources = corpus.sources or {}
    out: dict[str, Any] = {}
    for g in granularities:
        if g != "passage" and sources.get(g):
            out[g] = sources[g]
        elif g == "proposition" and (propositions or corpus.propositions):
            out[g] = str(propositions or corpus.propositions)
    return out


def first_unit_rows(source: Any, skips: Skips, n: int = 1) -> list[Any]:
    """The first `n` rows of a unit source of `unit_sources`, read by the stage's reader
    (`iter_unit_batches` for a collection, `iter_proposition_rows` for a propositions file)."""
    if isinstance(source, str):
        rows = iter_proposition_rows(source, skips)
    else:
        rows = (u for batch in iter_unit_batches(source, skips, n) for u in batch)
    out = []
    for row in rows:
        out.append(row)
        if len(out) >= n:
            break
    return out
