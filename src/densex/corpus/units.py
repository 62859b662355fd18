"""Retrieval units at the three granularities of the paper, written once and cached.

`build_units` turns a corpus config into `passages.jsonl` plus one unit file per granularity
(`passage.jsonl`, `sentence.jsonl`, `proposition.jsonl`) and a `manifest.json` (counts, average
words, input hashes, config, skipped records). The manifest is written last and carries a key
of everything the units depend on, so a finished directory is reused and a stale one rebuilt.
Unit ids: passage unit = passage id, sentence `"{passage_id}::s{i}"`, proposition
`"{passage_id}::p{i}"`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from densex.corpus.readers import Skips, numbered_jsonl, read_documents, read_passages
from densex.corpus.segment import (
    count_words,
    load_sentencizer,
    segment_paragraphs,
    sentencizer_id,
    split_sentences_many,
)
from densex.utils.cache import artifact_dir, content_key, hash_file
from densex.utils.integrity import file_records, handle_damage, remove_orphans, verify_files
from densex.utils.io import DataError, read_json, write_jsonl, write_manifest
from densex.utils.logging import get_logger

log = get_logger(__name__)

__all__ = [
    "GRANULARITIES",
    "UnitFiles",
    "build_units",
    "print_unit_table",
    "read_propositions",
    "unit_stats",
    "unit_table",
    "units_dir_for",
    "units_key",
]

GRANULARITIES = ("passage", "sentence", "proposition")
# Bump when the unit files' content or layout changes, so old caches are not reused.
UNITS_FORMAT_VERSION = 1
_DEFAULT_SEGMENTATION = {"max_words": 100, "min_tail_words": 50, "spacy_model": "en_core_web_lg"}


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


def _cfg(corpus_cfg: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = corpus_cfg.get(key, default)
    return default if value is None else value


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


def units_key(
    corpus_cfg: Mapping[str, Any], propositions_path: str | os.PathLike | None = None
) -> str:
    """Content key of everything the unit files depend on (inputs, segmentation, sentencizer)."""
    seg = _segmentation(corpus_cfg)
    parts: dict[str, Any] = {
        "version": UNITS_FORMAT_VERSION,
        "sentencizer": sentencizer_id(seg["spacy_model"]),
        "on_error": _cfg(corpus_cfg, "on_error", "raise"),
    }
    if corpus_cfg.get("passages"):
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


def _segment_documents(corpus_cfg: Mapping[str, Any], skips: Skips) -> list[dict[str, Any]]:
    seg = _segmentation(corpus_cfg)
    docs = list(read_documents(corpus_cfg, skips))
    nlp = load_sentencizer(seg["spacy_model"])
    chunks = segment_paragraphs(
        (d["text"] for d in docs), nlp, seg["max_words"], seg["min_tail_words"]
    )
    return [
        {"id": f"{doc['id']}-{c}", "title": doc["title"], "section": doc["section"], "text": text}
        for doc, texts in zip(docs, chunks)
        for c, text in enumerate(texts)
    ]


def read_propositions(
    path: str | os.PathLike, passage_ids: Iterable[str], skips: Skips | None = None
) -> dict[str, list[str]]:
    """Propositions per passage from `{"id": passage_id, "propositions": [str, ...]}` JSONL.

    Every passage must have a row and every row a known passage, so a truncated or mismatched
    file fails loudly (or, with `on_error="skip"`, every gap is counted).
    """
    skips = skips or Skips()
    known = list(passage_ids)
    known_set = set(known)
    out: dict[str, list[str]] = {}
    present: set[str] = set()
    for lineno, row in numbered_jsonl(path, skips):
        pid = row.get("id")
        if not isinstance(pid, str) or not pid:
            skips(DataError(path, lineno, "id", "missing or empty"))
            continue
        if pid not in known_set:
            skips(DataError(path, lineno, "id", f"unknown passage id {pid!r}"))
            continue
        if pid in present:
            skips(DataError(path, lineno, "id", f"duplicate passage id {pid!r}"))
            continue
        present.add(pid)
        props = row.get("propositions")
        if not isinstance(props, list):
            skips(
                DataError(
                    path, lineno, "propositions", f"expected a list, got {type(props).__name__}"
                )
            )
            continue
        kept = []
        for i, p in enumerate(props):
            if isinstance(p, str) and p.strip():
                kept.append(p.strip())
            else:
                skips(DataError(path, lineno, f"propositions[{i}]", "empty or not a string"))
        if not kept:
            skips(DataError(path, lineno, "propositions", "no propositions"))
            continue
        out[pid] = kept
    for pid in known:
        if pid not in present:
            skips(DataError(path, None, "id", f"passage {pid!r} has no propositions row"))
    return out


def _passage_units(passages: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in passages:
        yield {"id": p["id"], "passage_id": p["id"], "title": p["title"], "text": p["text"]}


def _sentence_units(passages: list[dict[str, Any]], spacy_model: str) -> Iterator[dict[str, Any]]:
    nlp = load_sentencizer(spacy_model)
    for p, sentences in zip(passages, split_sentences_many((p["text"] for p in passages), nlp)):
        for i, s in enumerate(sentences):
            yield {"id": f"{p['id']}::s{i}", "passage_id": p["id"], "title": p["title"], "text": s}


def _proposition_units(
    passages: list[dict[str, Any]], props: dict[str, list[str]]
) -> Iterator[dict[str, Any]]:
    for p in passages:
        for i, text in enumerate(props.get(p["id"], ())):
            yield {
                "id": f"{p['id']}::p{i}",
                "passage_id": p["id"],
                "title": p["title"],
                "text": text,
            }


def _write_counted(path: Path, rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    words = 0

    def counted() -> Iterator[dict[str, Any]]:
        nonlocal words
        for row in rows:
            words += count_words(row["text"])
            yield row

    n = write_jsonl(path, counted())
    return {"count": n, "avg_words": round(words / n, 2) if n else 0.0}


def _to_container(corpus_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved corpus config as plain JSON (objects such as a `Dataset` become strings)."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(corpus_cfg, DictConfig):
        corpus_cfg = OmegaConf.to_container(corpus_cfg, resolve=True)  # type: ignore[assignment]
    return json.loads(json.dumps(dict(corpus_cfg), default=str))


def _files(out_dir: Path, manifest: dict[str, Any]) -> UnitFiles:
    stats = manifest["units"]
    return UnitFiles(
        out_dir=out_dir,
        passages=out_dir / "passages.jsonl",
        units={g: out_dir / f"{g}.jsonl" for g in GRANULARITIES if g in stats},
        manifest=out_dir / "manifest.json",
        counts={g: s["count"] for g, s in stats.items()},
    )


def build_units(
    corpus_cfg: Mapping[str, Any],
    out_dir: str | os.PathLike,
    propositions_path: str | os.PathLike | None = None,
    *,
    overwrite: bool = False,
) -> UnitFiles:
    """Write passages and passage/sentence/proposition units to `out_dir` (cached by content).

    Passages come from `corpus_cfg.passages`, or from segmenting `corpus_cfg.documents` when it
    is null; propositions from `propositions_path` or `corpus_cfg.propositions` when either is set.
    """
    out = Path(out_dir)
    key = units_key(corpus_cfg, propositions_path)
    manifest_path = out / "manifest.json"
    remove_orphans(out)
    if manifest_path.exists() and not overwrite:
        manifest = read_json(manifest_path)
        if manifest.get("key") == key and isinstance(manifest.get("units"), dict):
            files = _files(out, manifest)
            names = [files.passages.name, *(p.name for p in files.units.values())]
            records = manifest.get("files") or {}
            problems = verify_files(out, {n: records.get(n) for n in names})
            if not handle_damage(
                problems, "units", f"rebuild: rm -r {out} (or cache.on_damaged=rebuild)"
            ):
                log.info("units: reusing %s", out)
                return files
    # the old manifest goes first: a crash mid-rebuild must not leave files that look complete
    manifest_path.unlink(missing_ok=True)
    start = time.perf_counter()
    seg = _segmentation(corpus_cfg)
    skips = Skips(_cfg(corpus_cfg, "on_error", "raise"))
    inputs: dict[str, Any] = {}
    if corpus_cfg.get("passages"):
        src = corpus_cfg["passages"]
        if corpus_cfg.get("passages_format") == "beir":  # BEIR corpus.jsonl: one passage a doc
            from densex.corpus.beir import read_beir_corpus

            passages = read_beir_corpus(src, skips)
        else:
            passages = read_passages(src, skips)
        inputs["passages"] = {"path": str(src), "sha256": hash_file(src)}
    else:
        passages = _segment_documents(corpus_cfg, skips)
        src = corpus_cfg.get("documents")
        inputs["documents"] = {"path": str(src), **_source_fingerprint(src, corpus_cfg)}
        seen: set[str] = set()
        for p in passages:
            if p["id"] in seen:
                raise DataError(src, None, "id", f"two documents make passage id {p['id']!r}")
            seen.add(p["id"])
    if not passages:
        raise DataError(src, None, None, "the corpus has no passages")

    units: dict[str, Any] = {}
    units["passage"] = _write_counted(out / "passage.jsonl", _passage_units(passages))
    units["sentence"] = _write_counted(
        out / "sentence.jsonl", _sentence_units(passages, seg["spacy_model"])
    )
    props_path = propositions_path or corpus_cfg.get("propositions")
    if props_path:
        props = read_propositions(props_path, (p["id"] for p in passages), skips)
        inputs["propositions"] = {"path": str(props_path), "sha256": hash_file(props_path)}
        units["proposition"] = _write_counted(
            out / "proposition.jsonl", _proposition_units(passages, props)
        )
    else:
        (out / "proposition.jsonl").unlink(missing_ok=True)
    write_jsonl(out / "passages.jsonl", passages)
    names = ["passages.jsonl", *(f"{g}.jsonl" for g in units)]
    manifest = {
        "key": key,
        "files": file_records(out, names),  # size + content hash, verified before reuse
        "corpus": corpus_cfg.get("name"),
        "format_version": UNITS_FORMAT_VERSION,
        "units": units,
        "inputs": inputs,
        "sentencizer": sentencizer_id(seg["spacy_model"]),
        "config": _to_container(corpus_cfg),
        "skipped": skips.summary(),
        "seconds": round(time.perf_counter() - start, 2),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_manifest(manifest_path, **manifest)
    log.info("units: wrote %s (%s)", out, ", ".join(f"{g} {s['count']}" for g, s in units.items()))
    return _files(out, manifest)


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
    from rich.table import Table

    table = Table(title=title or "Retrieval units (cf. Table 1)")
    table.add_column("")
    for row in rows:
        table.add_column(f"{row['granularity'].capitalize()}s", justify="right")
    table.add_row("# units", *(f"{r['count']:,}" for r in rows))
    table.add_row("Avg. # words", *(f"{r['avg_words']:.1f}" for r in rows))
    return table


def print_unit_table(rows: list[dict[str, Any]], title: str | None = None, console=None) -> None:
    """Print `unit_table(rows)` to `console` (a rich Console; stdout by default)."""
    from rich.console import Console

    (console or Console()).print(unit_table(rows, title))
