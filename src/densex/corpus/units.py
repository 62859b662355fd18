"""Retrieval units at the three granularities of the paper, written once and cached.

`build_units` turns a corpus config into `passages.jsonl` plus one unit file per granularity
(`passage.jsonl`, `sentence.jsonl`, `proposition.jsonl`), their columnar copies
(`arrow/<table>/NNNNN.arrow`, memory-mapped by every later stage: `corpus.columnar`) and a
`manifest.json` (counts, average words, input hashes, config, skipped records, and each units
file's SHA-256 and line count: `corpus.units_digest`). The source is
streamed in shards of `corpus.shard_rows` passages (or documents): each shard's passages and
sentences are written when complete, so a killed build resumes at the first missing shard, and
sentence splitting runs in `corpus.segmentation.n_process` processes (spaCy `nlp.pipe`). The manifest is written last and carries a key
of everything the units depend on, so a finished directory is reused and a stale one rebuilt.
Unit ids: passage unit = passage id, sentence `"{passage_id}::s{i}"`, proposition
`"{passage_id}::p{i}"`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from densex.corpus.columnar import ArrowTable, table_from_jsonl
from densex.corpus.passage_shards import build_passage_shards
from densex.corpus.readers import Skips
from densex.corpus.segment import sentencizer_id
from densex.corpus.spec import CorpusSpec
from densex.corpus.unit_export import export_passages_jsonl, export_units_jsonl
from densex.corpus.unit_shards import build_unit_tables
from densex.corpus.units_digest import digest_records
from densex.corpus.units_key import (
    GRANULARITIES,
    UNITS_FORMAT_VERSION,
    input_record,
    segmentation_settings,
    units_key,
    wanted_granularities,
)
from densex.utils.integrity import file_records, handle_damage, remove_orphans, verify_files
from densex.utils.io import read_json, write_json, write_manifest
from densex.utils.locks import build_once
from densex.utils.logging import get_logger

log = get_logger(__name__)

__all__ = [
    "UnitFiles",
    "build_units",
    "print_unit_table",
    "unit_stats",
    "unit_table",
    "unit_tables",
]


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


def build_units(
    corpus: CorpusSpec,
    out_dir: str | os.PathLike,
    propositions_path: str | os.PathLike | None = None,
    *,
    overwrite: bool = False,
) -> UnitFiles:
    """Write passages and passage/sentence/proposition units to `out_dir` (cached by content).

    Passages come from `corpus.passages`, or from segmenting `corpus.documents` when it
    is null; propositions from `propositions_path` or `corpus.propositions` when either is
    set. Arrow shards (`arrow/<table>/NNNNN.arrow`) are the columnar, memory-mapped copy the
    pipeline reads; the JSONL files are the interchange format. Memory does not grow with the
    corpus beyond one id per passage.
    """
    out = Path(out_dir)
    key = units_key(corpus, propositions_path)
    remove_orphans(out)
    # one build per key: a concurrent process waits for this one's lock, then reuses the files
    return build_once(
        out,
        "units",
        reuse=lambda: None if overwrite else _reuse(out, key),
        build=lambda: _build(corpus, out, key, propositions_path, overwrite),
    )


def _config_record(corpus: CorpusSpec) -> dict[str, Any]:
    """The manifest's copy of the corpus settings (JSON values; an in-memory dataset given as
    `documents` is recorded by its text, never deep-copied)."""
    fields = {f.name: getattr(corpus, f.name) for f in dataclasses.fields(corpus)}
    fields["segmentation"] = dataclasses.asdict(corpus.segmentation)
    fields["titles"] = dataclasses.asdict(corpus.titles)
    return json.loads(json.dumps(fields, default=str))


def _build(
    corpus: CorpusSpec, out: Path, key: str,
    propositions_path: str | os.PathLike | None, overwrite: bool,
) -> UnitFiles:  # fmt: skip
    """`build_units`' work, under the units lock: shards (resumed when the key matches), the
    JSONL exports, then the manifest."""
    # the old manifest goes first: a crash mid-rebuild must not leave files that look complete
    (out / "manifest.json").unlink(missing_ok=True)
    _start_fresh_unless_resuming(out, key, overwrite)
    start = time.perf_counter()
    seg = segmentation_settings(corpus)
    skips = Skips(corpus.on_error or "raise")
    wanted = wanted_granularities(corpus)
    sources = dict(corpus.sources or {})
    build_passage_shards(corpus, out, skips, [g for g in wanted if not sources.get(g)])
    passages = ArrowTable.open(out / "arrow" / "passages")
    outside: dict[str, int] = {}  # rows of passages a title filter left out, per table
    grans = build_unit_tables(corpus, out, passages, wanted, propositions_path, skips, outside)
    units = {g: export_units_jsonl(out, g, passages) for g in grans}
    export_passages_jsonl(out)
    manifest = {
        "key": key,
        "files": file_records(out, _artifact_names(out, grans)),  # verified before reuse
        # what embeddings are keyed by, so opening an index does not re-read the units files
        "digests": digest_records(out, [f"{g}.jsonl" for g in grans]),
        "corpus": corpus.name,
        "format_version": UNITS_FORMAT_VERSION,
        "units": units,
        "passages": len(passages),
        "tables": {t: f"arrow/{t}" for t in ("passages", *grans)},
        "inputs": input_record(corpus, propositions_path, "proposition" in grans),
        "sentencizer": sentencizer_id(seg["spacy_model"]),
        "config": _config_record(corpus),
        "skipped": skips.summary(),
        **({"outside_title_filter": outside} if outside else {}),
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
