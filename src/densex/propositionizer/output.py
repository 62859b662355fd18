"""The propositions file both backends write (the seq2seq model in `model_backend.py`, the LLM
teacher in `teacher_backend.py`): the model input of a passage, the parse with fallbacks, and the
`{"id", "propositions"}` JSONL + `manifest.json` beside it. Neither backend imports the other.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from densex.propositionizer.pairs import format_source
from densex.propositionizer.parse import ParseLimits
from densex.propositionizer.resolve import (
    ParseStats,
    Resolved,
    SentenceSplitter,
    resolve_output,
)
from densex.utils.integrity import file_record
from densex.utils.io import write_jsonl, write_manifest
from densex.utils.logging import get_logger
from densex.utils.records import Record

log = get_logger(__name__)

__all__ = ["NO_SKIPS", "manifest_path", "passage_source", "write_propositions"]

# the manifest's `skipped` when the passage reader skipped nothing
NO_SKIPS: dict[str, Any] = {"total": 0, "by_field": {}, "examples": []}


def passage_source(passage: Record) -> str:
    """The model input for a passage (or a per-sentence unit, with its `context` when it has
    one), `Title: {title}. Section: {section}. Content: {text}`: the same string as the
    training pairs (`pairs.format_source`), so a fine-tuned checkpoint sees at inference
    exactly what it was trained on."""
    title, section = passage.get("title") or "", passage.get("section") or ""
    return format_source(title, section, passage["text"], passage.get("context"))


def manifest_path(out_path: str | os.PathLike) -> Path:
    """Where the manifest of a propositions file lives: `manifest.json` beside it."""
    return Path(out_path).parent / "manifest.json"


def _resolve_all(
    units: Sequence[Record], owners: Sequence[int], raws: Sequence[str | None],
    fallback: str, spacy_model: str | None, limits: ParseLimits, min_shared: int = 0,
) -> Iterator[tuple[Record, int, Resolved]]:  # fmt: skip
    """(unit, its passage index, its resolved output) for every raw output; a parse error
    names the unit."""
    split = SentenceSplitter(spacy_model)
    for unit, owner, raw in zip(units, owners, raws):
        try:
            title = unit.get("title") or ""
            resolved = resolve_output(
                raw, unit["text"], fallback, split, limits, title=title, min_shared=min_shared
            )
        except Exception as e:
            raise ValueError(f"passage {unit['id']!r}: parsing its output failed: {e}") from e
        yield unit, owner, resolved


def write_propositions(
    passages: Sequence[Record],
    raws: Sequence[str | None],
    out_path: str | os.PathLike,
    fallback: str = "sentences",
    spacy_model: str | None = "en_core_web_lg",
    limits: ParseLimits | None = None,
    units: Sequence[Record] | None = None,
    owners: Sequence[int] | None = None,
    min_shared_words: int = 0,
    **manifest: Any,
) -> ParseStats:
    """Parse every raw output (with fallbacks, within `limits`) and write the propositions
    file + manifest (with the file's size and content hash, checked before reuse).

    One row per passage, in passage order. `raws` are the outputs of `units` (default: the
    passages; `owners[i]`: unit i's passage, `sentence_inputs.py`), each parsed and falling
    back on its own text; parse counts are per unit (`outputs`), rejected ids logged. The
    filter `min_shared_words` drops propositions as `resolve.supported` says.
    """
    units = passages if units is None else units
    owners = range(len(passages)) if owners is None else owners
    if len(raws) != len(units) or len(owners) != len(units):
        raise ValueError(f"{len(raws)} outputs for {len(units)} inputs ({len(owners)} owners)")
    limits = limits or ParseLimits()
    rows: list[Record] = [{"id": p["id"], "propositions": []} for p in passages]
    stats, rejected_ids = ParseStats(), []
    parse = (fallback, spacy_model, limits, min_shared_words)
    for unit, owner, resolved in _resolve_all(units, owners, raws, *parse):
        if resolved.result.rejected:
            rejected_ids.append(unit["id"])
            if len(rejected_ids) <= 5:
                log.warning(
                    "passage %r: output rejected (%s); fallback %s",
                    *(unit["id"], resolved.result.error, fallback),
                )
        stats.add(resolved)
        rows[owner]["propositions"].extend(resolved.propositions)
    write_jsonl(out_path, rows)
    counts = stats.as_dict()
    counts["outputs"], counts["passages"] = counts["passages"], len(passages)
    write_manifest(
        manifest_path(out_path),
        artifact=Path(out_path).name,
        **counts,
        rejected_examples=rejected_ids[:20],
        limits=dataclasses.asdict(limits),
        fallback=fallback,
        file=file_record(out_path),
        **manifest,
    )
    log.info(
        "wrote %d passages -> %d propositions to %s (strict %d, repaired %d, fallbacks %s, dropped %d)",
        *(counts["passages"], counts["propositions"], out_path, counts["parsed_strict"]),
        *(counts["repaired"], counts["fallbacks"], counts["items_dropped"]),
    )
    return stats
