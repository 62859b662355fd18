"""The units stage's first pass: the source streamed into resumable passage shards.

The source (a passages file, a BEIR corpus, a ready-made collection's passages, or documents
segmented into 100-word passages) is cut into shards of `corpus.shard_rows` source rows. Shard
`b` writes `arrow/sentence/`, `arrow/passage/` and last `arrow/passages/NNNNN.arrow`: the
passages file is the shard's completion mark, so a killed build resumes at the first shard
without one. Passage ids must be unique (a repeat is a `DataError` for `Skips`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from densex.corpus.columnar import PASSAGE_SCHEMA, UNIT_SCHEMA, ArrowTable, shard_path, write_shard
from densex.corpus.readers import Skips
from densex.corpus.segment import (
    count_words,
    load_sentencizer,
    segment_paragraphs,
    split_sentences_many,
)
from densex.corpus.sources import source_rows
from densex.corpus.spec import CorpusSpec
from densex.corpus.units_key import DEFAULT_SHARD_ROWS, segmentation_settings
from densex.utils.io import DataError
from densex.utils.logging import get_logger
from densex.utils.progress import Progress
from densex.utils.shards import batched

log = get_logger(__name__)

__all__ = ["build_passage_shards"]


def _segment_batch(
    docs: list[dict[str, Any]], seg: dict[str, Any], seen: set[str], src: Any
) -> list[dict[str, Any]]:
    """One batch of documents -> their 100-word passages (ids `<doc id>-<chunk>`)."""
    nlp = load_sentencizer(seg["spacy_model"])
    chunks = segment_paragraphs(
        (d["text"] for d in docs),
        nlp,
        seg["max_words"],
        seg["min_tail_words"],
        n_process=int(seg.get("n_process") or 1),
    )
    out = []
    for doc, texts in zip(docs, chunks):
        for c, text in enumerate(texts):
            pid = f"{doc['id']}-{c}"
            if pid in seen:
                raise DataError(src, None, "id", f"two documents make passage id {pid!r}")
            seen.add(pid)
            out.append({"id": pid, "title": doc["title"], "section": doc["section"], "text": text})
    return out


def _write_passage_shard(
    out: Path, b: int, passages: list[dict[str, Any]], offset: int, seg: dict[str, Any],
    granularities: Sequence[str],
) -> None:  # fmt: skip
    """Shard `b`: its sentence units, passage units, then (last: the shard's completion mark)
    the passages themselves."""
    arrow = out / "arrow"
    ids = [p["id"] for p in passages]
    texts = [p["text"] for p in passages]
    words = [count_words(t) for t in texts]
    rows = list(range(offset, offset + len(passages)))
    if "sentence" in granularities:
        nlp = load_sentencizer(seg["spacy_model"])
        cols: dict[str, list] = {f.name: [] for f in UNIT_SCHEMA}
        n_process = int(seg.get("n_process") or 1)
        for pid, row, sents in zip(
            ids, rows, split_sentences_many(texts, nlp, n_process=n_process)
        ):
            for i, sentence in enumerate(sents):
                cols["id"].append(f"{pid}::s{i}")
                cols["passage_id"].append(pid)
                cols["passage_row"].append(row)
                cols["text"].append(sentence)
                cols["words"].append(count_words(sentence))
        write_shard(shard_path(arrow / "sentence", b), cols, UNIT_SCHEMA)
    unit_cols = {"id": ids, "passage_id": ids, "passage_row": rows, "text": texts, "words": words}
    write_shard(shard_path(arrow / "passage", b), unit_cols, UNIT_SCHEMA)
    passage_cols = {
        "id": ids,
        "title": [p["title"] for p in passages],
        "section": [p["section"] for p in passages],
        "text": texts,
        "words": words,
    }
    write_shard(shard_path(arrow / "passages", b), passage_cols, PASSAGE_SCHEMA)


def build_passage_shards(
    corpus: CorpusSpec, out: Path, skips: Skips, granularities: Sequence[str]
) -> int:
    """Stream the source into shards of `corpus.shard_rows` source rows (resumable: a shard
    whose passages file exists is complete and kept); return the number of passages."""
    seg = segmentation_settings(corpus)
    shard_rows = int(corpus.shard_rows or DEFAULT_SHARD_ROWS)
    collection = ((corpus.sources or {}).get("passage") or {}).get("path")
    from_documents = not (corpus.passages or collection)
    src = corpus.documents if from_documents else corpus.passages
    src = collection or src
    seen: set[str] = set()  # documents: the passage ids made so far (ids must be unique)
    offset = kept = 0
    with Progress("units: passages", unit="passages") as bar:
        for b, batch in enumerate(batched(source_rows(corpus, skips), shard_rows)):
            done = shard_path(out / "arrow" / "passages", b)
            if done.exists():  # resumed: this shard was completed by an earlier run
                table = ArrowTable.open_files([done])
                n = len(table)
                if from_documents:
                    seen.update(table.slice("id", 0, n))
                offset, kept = offset + n, kept + 1
                bar.advance(n)
                continue
            passages = _segment_batch(batch, seg, seen, src) if from_documents else batch
            _write_passage_shard(out, b, passages, offset, seg, granularities)
            offset += len(passages)
            bar.advance(len(passages))
    if kept:
        log.info("units: resumed, %d shards were already complete", kept)
    if offset == 0:
        raise DataError(src, None, None, "the corpus has no passages")
    return offset
