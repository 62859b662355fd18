"""Retrieval units at the three granularities of the paper, written once and cached.

`build_units` turns a corpus config into `passages.jsonl` plus one unit file per granularity
(`passage.jsonl`, `sentence.jsonl`, `proposition.jsonl`), their columnar copies
(`arrow/<table>/NNNNN.arrow`, memory-mapped by every later stage: `corpus.columnar`) and a
`manifest.json` (counts, average words, input hashes, config, skipped records). The source is
streamed in shards of `corpus.shard_rows` passages (or documents): each shard's passages and
sentences are written when complete, so a killed build resumes at the first missing shard, and
sentence splitting runs in `corpus.segmentation.n_process` processes (spaCy `nlp.pipe`). The manifest is written last and carries a key
of everything the units depend on, so a finished directory is reused and a stale one rebuilt.
Unit ids: passage unit = passage id, sentence `"{passage_id}::s{i}"`, proposition
`"{passage_id}::p{i}"`.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from densex.corpus.beir import read_beir_corpus
from densex.corpus.collections import iter_passage_batches, iter_unit_batches
from densex.corpus.columnar import (
    PASSAGE_SCHEMA,
    UNIT_SCHEMA,
    ArrowTable,
    shard_path,
    table_from_jsonl,
    write_shard,
)
from densex.corpus.readers import Skips, iter_passages, read_documents
from densex.corpus.segment import (
    count_words,
    load_sentencizer,
    segment_paragraphs,
    sentencizer_id,
    split_sentences_many,
)
from densex.utils.cache import artifact_dir, content_key, hash_file
from densex.utils.config import plain_data
from densex.utils.integrity import file_records, handle_damage, remove_orphans, verify_files
from densex.utils.io import (
    DataError,
    atomic_open,
    jsonl_line,
    numbered_jsonl,
    read_json,
    write_json,
    write_manifest,
)
from densex.utils.logging import get_logger
from densex.utils.progress import Progress
from densex.utils.shards import batched

log = get_logger(__name__)

__all__ = [
    "GRANULARITIES",
    "UnitFiles",
    "build_units",
    "print_unit_table",
    "unit_stats",
    "unit_table",
    "unit_tables",
    "units_dir_for",
    "units_key",
]

GRANULARITIES = ("passage", "sentence", "proposition")
# Bump when the unit files' content or layout changes, so old caches are not reused.
UNITS_FORMAT_VERSION = 2  # 2: Arrow shards beside the JSONL files
_DEFAULT_SEGMENTATION = {
    "max_words": 100,
    "min_tail_words": 50,
    "spacy_model": "en_core_web_lg",
    "n_process": 1,
}
DEFAULT_SHARD_ROWS = 20_000  # source rows (passages or documents) per passage shard
DEFAULT_SHARD_UNITS = 200_000  # units per proposition shard
EXPORT_ROWS = 50_000  # rows per batch when writing the JSONL files from the shards


@dataclass(frozen=True)
class UnitFiles:
    """Paths of a built units directory; `files["sentence"]` is that granularity's JSONL."""

    out_dir: Path
    passages: Path
    units: dict[str, Path]
    manifest: Path
    counts: dict[str, int] = field(default_factory=dict)

    def __getitem__(self, granularity: str) -> Path:
        if granularity not in self.units:
            hint = (
                " (set corpus.propositions=FILE or run the propositions stage)"
                if granularity == "proposition"
                else ""
            )
            raise KeyError(f"no {granularity!r} units in {self.out_dir}{hint}")
        return self.units[granularity]

    def __contains__(self, granularity: object) -> bool:
        return granularity in self.units


def _segmentation(corpus_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Segmentation settings with defaults for missing keys (`spacy_model: null` or "" means
    spaCy's rule-based sentencizer)."""
    seg = dict(_DEFAULT_SEGMENTATION)
    seg.update(dict(corpus_cfg.get("segmentation") or {}))
    return seg


def _hash_input(path: Any) -> str:
    if not Path(os.path.expanduser(str(path))).is_file():
        raise DataError(path, None, None, "file not found")
    return hash_file(os.path.expanduser(str(path)))


def _source_fingerprint(src: Any, corpus_cfg: Mapping[str, Any]) -> dict[str, Any]:
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
    return {"hf": str(src), **{k: corpus_cfg.get(k) for k in keys}}


def _collection_fingerprint(source_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A collection source's identity: its settings plus, for a local copy, each file's
    name, size and mtime (not a content hash: FactoidWiki is ~100 GB), else the hub id."""
    settings = {k: v for k, v in dict(source_cfg).items() if k != "path"}
    path = Path(os.path.expanduser(str(source_cfg.get("path"))))
    if path.is_file():
        return {**settings, "sha256": hash_file(path)}
    if path.is_dir():
        files = sorted(f for f in path.rglob("*") if f.is_file())
        stat = [(str(f.relative_to(path)), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
        return {**settings, "files": stat}
    return {**settings, "hf": str(source_cfg.get("path"))}


def units_key(
    corpus_cfg: Mapping[str, Any], propositions_path: str | os.PathLike | None = None
) -> str:
    """Content key of everything the unit files depend on (inputs, segmentation, sentencizer)."""
    seg = _segmentation(corpus_cfg)
    parts: dict[str, Any] = {
        "version": UNITS_FORMAT_VERSION,
        "sentencizer": sentencizer_id(seg["spacy_model"]),
        "on_error": corpus_cfg.get("on_error") or "raise",
        "granularities": list(_granularities(corpus_cfg)),
        "shard_rows": int(corpus_cfg.get("shard_rows") or DEFAULT_SHARD_ROWS),
    }
    sources = dict(corpus_cfg.get("sources") or {})
    if sources:  # ready-made collections (FactoidWiki)
        parts["sources"] = {g: _collection_fingerprint(s) for g, s in sources.items() if s}
    elif corpus_cfg.get("passages"):
        parts["passages"] = _hash_input(corpus_cfg["passages"])
        if corpus_cfg.get("passages_format"):  # set only for non-default formats (beir)
            parts["passages_format"] = corpus_cfg["passages_format"]
    else:
        reader_keys = ("documents_format", "title_column", "text_column", "id_column",
                       "section_column", "paragraph_separator")  # fmt: skip
        parts["documents"] = _source_fingerprint(corpus_cfg.get("documents"), corpus_cfg)
        parts["reader"] = {k: corpus_cfg.get(k) for k in reader_keys}
        parts["segmentation"] = {k: seg[k] for k in ("max_words", "min_tail_words")}
    props = propositions_path or corpus_cfg.get("propositions")
    parts["propositions"] = _hash_input(props) if props else None
    return content_key(**parts)


def units_dir_for(
    corpus_cfg: Mapping[str, Any],
    cache_dir: str | os.PathLike,
    propositions_path: str | os.PathLike | None = None,
) -> Path:
    """`<cache_dir>/units/<corpus name>/<units_key>`: the directory index and evaluate share."""
    return artifact_dir(cache_dir, "units", str(corpus_cfg.get("name") or "corpus"),
                        key=units_key(corpus_cfg, propositions_path))  # fmt: skip


def _granularities(corpus_cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """The unit granularities to build (`corpus.granularities`, default all three)."""
    wanted = tuple(corpus_cfg.get("granularities") or GRANULARITIES)
    unknown = sorted(set(wanted) - set(GRANULARITIES))
    if unknown:
        raise ValueError(f"corpus.granularities: unknown {unknown} (choose from {GRANULARITIES})")
    return wanted


def _source_rows(corpus_cfg: Mapping[str, Any], skips: Skips) -> Iterator[dict[str, Any]]:
    """Passages (`corpus.passages`) or documents (`corpus.documents`), streamed."""
    sources = corpus_cfg.get("sources") or {}
    if sources.get("passage"):  # a ready-made collection (FactoidWiki's passages)
        return _unique(_collection_passages(sources["passage"], skips), skips, sources["passage"])
    src = corpus_cfg.get("passages")
    if src and corpus_cfg.get("passages_format") == "beir":  # BEIR corpus.jsonl: a doc a passage
        return iter(read_beir_corpus(src, skips))
    if src:
        return iter_passages(src, skips)
    return read_documents(corpus_cfg, skips)


def _collection_passages(source_cfg: Mapping[str, Any], skips: Skips) -> Iterator[dict]:

    for batch in iter_passage_batches(source_cfg, skips, 10_000):
        yield from batch


def _unique(rows: Iterator[dict], skips: Skips, source_cfg: Mapping[str, Any]) -> Iterator[dict]:
    """Passages with an id not seen before (a repeat is a `DataError` for `skips`)."""
    seen: set[str] = set()
    for row in rows:
        if row["id"] in seen:
            skips(DataError(str(source_cfg.get("path")), None, "id",
                            f"duplicate passage id {row['id']!r}"))  # fmt: skip
            continue
        seen.add(row["id"])
        yield row


def _segment_batch(
    docs: list[dict[str, Any]], seg: Mapping[str, Any], seen: set[str], src: Any
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
    out: Path, b: int, passages: list[dict[str, Any]], offset: int, seg: Mapping[str, Any],
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


def _build_passage_shards(
    corpus_cfg: Mapping[str, Any], out: Path, skips: Skips, granularities: Sequence[str]
) -> int:
    """Stream the source into shards of `corpus.shard_rows` source rows (resumable: a shard
    whose passages file exists is complete and kept); return the number of passages."""
    seg = _segmentation(corpus_cfg)
    shard_rows = int(corpus_cfg.get("shard_rows") or DEFAULT_SHARD_ROWS)
    collection = ((corpus_cfg.get("sources") or {}).get("passage") or {}).get("path")
    from_documents = not (corpus_cfg.get("passages") or collection)
    src = corpus_cfg.get("documents") if from_documents else corpus_cfg.get("passages")
    src = collection or src
    seen: set[str] = set()  # documents: the passage ids made so far (ids must be unique)
    offset = kept = 0
    with Progress("units: passages", unit="passages") as bar:
        for b, batch in enumerate(batched(_source_rows(corpus_cfg, skips), shard_rows)):
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


def _check_proposition_row(
    path: Any, lineno: int, row: dict[str, Any], row_of: dict[str, int], seen: np.ndarray,
    skips: Skips,
) -> tuple[int, list[str]] | None:  # fmt: skip
    """(passage row, propositions) of one `{"id", "propositions"}` row, or None (skipped)."""
    pid = row.get("id")
    if not isinstance(pid, str) or not pid:
        return skips(DataError(path, lineno, "id", "missing or empty"))
    prow = row_of.get(pid)
    if prow is None:
        return skips(DataError(path, lineno, "id", f"unknown passage id {pid!r}"))
    if seen[prow]:
        return skips(DataError(path, lineno, "id", f"duplicate passage id {pid!r}"))
    seen[prow] = True
    props = row.get("propositions")
    if not isinstance(props, list):
        why = f"expected a list, got {type(props).__name__}"
        return skips(DataError(path, lineno, "propositions", why))
    kept = []
    for i, p in enumerate(props):
        if isinstance(p, str) and p.strip():
            kept.append(p.strip())
        else:
            skips(DataError(path, lineno, f"propositions[{i}]", "empty or not a string"))
    if not kept:
        return skips(DataError(path, lineno, "propositions", "no propositions"))
    return prow, kept


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
    skips: Skips, shard_units: int,
) -> None:  # fmt: skip
    """Proposition units from `{"id": passage_id, "propositions": [str, ...]}` JSONL, in the
    file's row order, streamed into shards. Every passage must have a row and every row a known
    passage, so a truncated or mismatched file fails loudly (or, with `on_error="skip"`, every
    gap is counted). Memory: one dict entry and one flag per passage, nothing per unit."""
    seen = np.zeros(len(passages), dtype=bool)
    shards = _UnitShards(out, "proposition", shard_units)
    with Progress("units: propositions", unit="passages") as bar:
        for lineno, row in numbered_jsonl(path, on_error=skips):
            checked = _check_proposition_row(path, lineno, row, row_of, seen, skips)
            bar.advance(1)
            if checked is not None:
                prow, props = checked
                for i, text in enumerate(props):
                    shards.add(f"{row['id']}::p{i}", row["id"], prow, text)
    shards.close()
    for prow in np.flatnonzero(~seen).tolist():
        pid = passages.slice("id", prow, prow + 1)[0]
        skips(DataError(path, None, "id", f"passage {pid!r} has no propositions row"))


def _build_collection_shards(
    source_cfg: Mapping[str, Any], granularity: str, row_of: dict[str, int], out: Path,
    skips: Skips, shard_units: int,
) -> None:  # fmt: skip
    """Units of a ready-made collection (`corpus.sources.<granularity>`: FactoidWiki's
    sentences / propositions), passage by the source's mapping rule, streamed into shards in
    the collection's order; a unit of an unknown passage is a located `DataError`."""

    shards = _UnitShards(out, granularity, shard_units)
    source = str(source_cfg.get("path"))
    with Progress(f"units: {granularity}", unit="units") as bar:
        for batch in iter_unit_batches(source_cfg, skips, 10_000):
            for u in batch:
                prow = row_of.get(u["passage_id"])
                if prow is None:
                    why = f"unit {u['id']!r}: unknown passage {u['passage_id']!r}"
                    skips(DataError(source, None, "passage_id", why))
                    continue
                shards.add(u["id"], u["passage_id"], prow, u["text"])
            bar.advance(len(batch))
    shards.close()


def _export_jsonl(out: Path, granularity: str, passages: ArrowTable) -> dict[str, Any]:
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


def _export_passages(out: Path) -> None:
    with atomic_open(out / "passages.jsonl") as f:
        for part in _slices_shard_by_shard(out / "arrow" / "passages"):
            cols = [part.column(c).to_pylist() for c in ("id", "title", "section", "text")]
            for pid, title, section, text in zip(*cols):
                row = {"id": pid, "title": title, "section": section, "text": text}
                f.write(jsonl_line(row))


def _files(out_dir: Path, manifest: dict[str, Any]) -> UnitFiles:
    stats = manifest["units"]
    return UnitFiles(
        out_dir=out_dir,
        passages=out_dir / "passages.jsonl",
        units={g: out_dir / f"{g}.jsonl" for g in GRANULARITIES if g in stats},
        manifest=out_dir / "manifest.json",
        counts={g: s["count"] for g, s in stats.items()},
    )


def _artifact_names(out: Path, granularities: Iterable[str]) -> list[str]:
    names = ["passages.jsonl", *(f"{g}.jsonl" for g in granularities)]
    for table in ("passages", *granularities):
        names += [str(p.relative_to(out)) for p in sorted((out / "arrow" / table).glob("*.arrow"))]
    return names


def _reuse(out: Path, key: str) -> UnitFiles | None:
    """The finished units of `key` in `out`, verified (size + hash per file), or None."""
    manifest_path = out / "manifest.json"
    if not manifest_path.exists():
        return None
    manifest = read_json(manifest_path)
    if manifest.get("key") != key or not isinstance(manifest.get("units"), dict):
        return None
    records = manifest.get("files") or {}
    problems = verify_files(out, records)
    if handle_damage(problems, "units", f"rebuild: rm -r {out} (or cache.on_damaged=rebuild)"):
        return None
    log.info("units: reusing %s", out)
    return _files(out, manifest)


def _start_fresh_unless_resuming(out: Path, key: str, overwrite: bool) -> None:
    """Keep the shards of an interrupted build of the same key (resume); drop anything else."""
    job = out / "arrow" / "job.json"
    same = job.exists() and read_json(job).get("key") == key
    if overwrite or not same:
        shutil.rmtree(out / "arrow", ignore_errors=True)
        write_json(job, {"key": key})
    else:
        log.info("units: resuming the interrupted build in %s", out)


def _build_unit_tables(
    corpus_cfg: Mapping[str, Any], out: Path, passages: ArrowTable, wanted: Sequence[str],
    propositions_path: str | os.PathLike | None, skips: Skips,
) -> list[str]:  # fmt: skip
    """The unit tables beyond the passage shards' own (a collection's sentences/propositions,
    the propositions file); returns the granularities built, in order."""
    sources = dict(corpus_cfg.get("sources") or {})
    shard_units = int(corpus_cfg.get("shard_units") or DEFAULT_SHARD_UNITS)
    props_path = propositions_path or corpus_cfg.get("propositions")
    grans = []
    row_of: dict[str, int] | None = None  # passage id -> row, built once if any table needs it
    for g in wanted:
        if g != "passage" and (sources.get(g) or (g == "proposition" and props_path)):
            row_of = row_of if row_of is not None else _passage_rows(passages)
        if sources.get(g) and g != "passage":
            _build_collection_shards(sources[g], g, row_of, out, skips, shard_units)
        elif g == "proposition":
            if not props_path:
                shutil.rmtree(out / "arrow" / "proposition", ignore_errors=True)
                (out / "proposition.jsonl").unlink(missing_ok=True)
                continue
            _build_proposition_shards(props_path, passages, row_of, out, skips, shard_units)
        grans.append(g)
    return grans


def _inputs(
    corpus_cfg: Mapping[str, Any], propositions_path: str | os.PathLike | None, with_props: bool
) -> dict[str, Any]:
    """The manifest's record of what the units were built from."""
    sources = dict(corpus_cfg.get("sources") or {})
    if sources:
        return {g: _collection_fingerprint(s) for g, s in sources.items() if s}
    src = corpus_cfg.get("passages") or corpus_cfg.get("documents")
    kind = "passages" if corpus_cfg.get("passages") else "documents"
    inputs = {kind: {"path": str(src), **_source_fingerprint(src, corpus_cfg)}}
    props = propositions_path or corpus_cfg.get("propositions")
    if props and with_props:
        inputs["propositions"] = {"path": str(props), "sha256": hash_file(props)}
    return inputs


def build_units(
    corpus_cfg: Mapping[str, Any],
    out_dir: str | os.PathLike,
    propositions_path: str | os.PathLike | None = None,
    *,
    overwrite: bool = False,
) -> UnitFiles:
    """Write passages and passage/sentence/proposition units to `out_dir` (cached by content).

    Passages come from `corpus_cfg.passages`, or from segmenting `corpus_cfg.documents` when it
    is null; propositions from `propositions_path` or `corpus_cfg.propositions` when either is
    set. Arrow shards (`arrow/<table>/NNNNN.arrow`) are the columnar, memory-mapped copy the
    pipeline reads; the JSONL files are the interchange format. Memory does not grow with the
    corpus beyond one id per passage.
    """
    out = Path(out_dir)
    key = units_key(corpus_cfg, propositions_path)
    remove_orphans(out)
    if not overwrite and (files := _reuse(out, key)) is not None:
        return files
    # the old manifest goes first: a crash mid-rebuild must not leave files that look complete
    (out / "manifest.json").unlink(missing_ok=True)
    _start_fresh_unless_resuming(out, key, overwrite)
    start = time.perf_counter()
    seg = _segmentation(corpus_cfg)
    skips = Skips(corpus_cfg.get("on_error") or "raise")
    wanted = _granularities(corpus_cfg)
    sources = dict(corpus_cfg.get("sources") or {})
    _build_passage_shards(corpus_cfg, out, skips, [g for g in wanted if not sources.get(g)])
    passages = ArrowTable.open(out / "arrow" / "passages")
    grans = _build_unit_tables(corpus_cfg, out, passages, wanted, propositions_path, skips)
    units = {g: _export_jsonl(out, g, passages) for g in grans}
    _export_passages(out)
    manifest = {
        "key": key,
        "files": file_records(out, _artifact_names(out, grans)),  # verified before reuse
        "corpus": corpus_cfg.get("name"),
        "format_version": UNITS_FORMAT_VERSION,
        "units": units,
        "passages": len(passages),
        "tables": {t: f"arrow/{t}" for t in ("passages", *grans)},
        "inputs": _inputs(corpus_cfg, propositions_path, "proposition" in grans),
        "sentencizer": sentencizer_id(seg["spacy_model"]),
        "config": json.loads(json.dumps(plain_data(corpus_cfg), default=str)),
        "skipped": skips.summary(),
        "seconds": round(time.perf_counter() - start, 2),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_manifest(out / "manifest.json", **manifest)
    log.info("units: wrote %s (%s)", out, ", ".join(f"{g} {s['count']}" for g, s in units.items()))
    return _files(out, manifest)


def unit_tables(units_path: str | os.PathLike) -> tuple[ArrowTable | None, ArrowTable]:
    """(passages, units) of a units file as memory-mapped tables: the Arrow shards the units
    stage wrote beside `<dir>/<granularity>.jsonl` (or, for a fused cell's `a+b.jsonl`, the
    members' shards in order). A units file made elsewhere is read into memory: with the
    passages table when one is beside it (unknown passages are an error), else alone
    (passages None; the units keep their own `title`)."""
    path = Path(units_path)
    arrow = path.parent / "arrow"
    if not (arrow / "passages").is_dir():
        return None, table_from_jsonl(path)
    passages = ArrowTable.open(arrow / "passages")
    members = [arrow / g for g in path.name.removesuffix(".jsonl").split("+")]
    if path.name.endswith(".jsonl") and all(d.is_dir() for d in members):
        files = [f for d in members for f in sorted(d.glob("*.arrow"))]
        return passages, ArrowTable.open_files(files, path)
    ids = passages.slice("id", 0, len(passages))
    return passages, table_from_jsonl(path, {pid: i for i, pid in enumerate(ids)})


def unit_stats(units: UnitFiles | str | os.PathLike) -> list[dict[str, Any]]:
    """Rows `{granularity, count, avg_words}` of a units directory (the paper's Table 1)."""
    out = units.out_dir if isinstance(units, UnitFiles) else Path(units)
    manifest = read_json(out / "manifest.json")
    return [
        {"granularity": g, "count": s["count"], "avg_words": s["avg_words"]}
        for g in GRANULARITIES
        if (s := manifest["units"].get(g))
    ]


def unit_table(rows: list[dict[str, Any]], title: str | None = None):
    """A rich Table laid out like the paper's Table 1 (# units, avg. # words per unit)."""

    table = Table(title=title or "Retrieval units (cf. Table 1)")
    table.add_column("")
    for row in rows:
        table.add_column(f"{row['granularity'].capitalize()}s", justify="right")
    table.add_row("# units", *(f"{r['count']:,}" for r in rows))
    table.add_row("Avg. # words", *(f"{r['avg_words']:.1f}" for r in rows))
    return table


def print_unit_table(rows: list[dict[str, Any]], title: str | None = None, console=None) -> None:
    """Print `unit_table(rows)` to `console` (a rich Console; stdout by default)."""

    (console or Console()).print(unit_table(rows, title))
