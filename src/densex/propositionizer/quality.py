"""What a quality report needs to know about a propositionizer's output, beyond the text.

- `split_passage_ids`: the passages of the training split's train or validation articles,
  by the very rule `PropositionDataModule` splits its pairs with (`pairs.split_articles`: a
  fixed hash of the title), so a report can run on exactly the passages a model never saw.
- `parse_outcomes`: per passage, how its propositions were obtained (strict JSON, repaired,
  or a fallback) and whether generation hit `max_new_tokens`, recovered from the generation
  manifest beside a propositions file and the raw outputs in its shards (`model_backend.py`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from densex.propositionizer.output import manifest_path
from densex.propositionizer.pairs import split_articles
from densex.propositionizer.parse import parse_propositions
from densex.propositionizer.sentence_inputs import passage_units
from densex.utils.io import DataError, read_json, read_jsonl
from densex.utils.logging import get_logger
from densex.utils.records import Record

log = get_logger(__name__)

__all__ = ["PARSE_KEYS", "parse_outcomes", "read_generation_manifest", "split_passage_ids"]

SPLITS = ("train", "validation", "test")
# the generation manifest's parse counts (write_propositions / ParseStats.as_dict)
PARSE_KEYS = (
    "passages",
    "outputs",  # model inputs: the passages, or their sentences (per_sentence)
    "parsed_strict",
    "repaired",
    "unparseable",
    "fallbacks",
    "fallback_total",
    "fallback_reasons",
    "items_dropped",
    "hit_max_new_tokens",
)


def split_passage_ids(
    passages: Sequence[Record],
    val_fraction: float,
    split: str = "validation",
    test_fraction: float = 0.0,
) -> list[str]:
    """Ids of the passages (`{"id", "title", ...}`, in order) whose article the training data
    split puts in `split` ("train" | "validation" | "test") at `val_fraction` and
    `test_fraction` (`data.val_fraction`, `data.test_fraction`).

    The rule is per title, so a passage's split does not depend on the other passages; only
    the edge cases of `split_articles` (no title hashes into a range, or all do) look at
    the whole title set, which is the same as training's when `passages` are its passages.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    rows = [{"id": p["id"], "title": p.get("title") or ""} for p in passages]
    train, val, test = split_articles(rows, float(val_fraction), float(test_fraction))
    return [r["id"] for r in {"train": train, "validation": val, "test": test}[split]]


def read_generation_manifest(propositions_path: str | os.PathLike) -> dict[str, Any] | None:
    """The manifest `generate_propositions` wrote beside a propositions file, or None (a plain file)."""
    path = manifest_path(propositions_path)
    if not path.exists():
        return None
    manifest = read_json(path)
    if not isinstance(manifest, dict) or "parsed_strict" not in manifest:
        return None  # some other manifest.json (e.g. the shared data's), not a generation's
    if manifest.get("artifact") not in (None, Path(propositions_path).name):
        return None
    return manifest


def parse_outcomes(
    propositions_path: str | os.PathLike,
    predictions: Mapping[str, Sequence[str]],
) -> dict[str, dict[str, Any]] | None:
    """Per passage id of `predictions`: `{"parse": "strict" | "repaired" | "fallback",
    "fallback_reason": None | "unparseable" | "empty", "repairs": "a;b", "cut": bool}`,
    from the raw outputs in the shards named by the generation manifest beside
    `propositions_path`, parsed again with `parse.parse_propositions`.

    None (with a logged reason) when that cannot be known: no generation manifest or no
    shards (a teacher's or hand-made file), shards deleted, a passage missing from them, or
    shards that no longer match the file (a parsed output that differs from its row).
    """
    manifest = read_generation_manifest(propositions_path)
    shards = (manifest or {}).get("shards") or {}
    shard_dir = Path(shards["dir"]) if shards.get("dir") else None
    if shard_dir is None or not shard_dir.is_dir():
        why = "no generation manifest" if manifest is None else f"no shards at {shard_dir}"
        log.info("per-passage parse results unknown for %s (%s)", propositions_path, why)
        return None
    raws: dict[str, dict[str, Any]] = {}
    try:
        for shard in sorted(shard_dir.glob("shard-*.jsonl")):
            for row in read_jsonl(shard, required=("id", "raw")):
                raws[str(row["id"])] = row
    except DataError as e:
        log.warning("per-passage parse results unknown: unreadable shard (%s)", e)
        return None
    per_sentence = bool((manifest.get("settings") or {}).get("per_sentence"))
    out: dict[str, dict[str, Any]] = {}
    for pid, props in predictions.items():
        rows = [raws[u] for u in passage_units(pid, raws)] if per_sentence else [raws.get(pid)]
        if not rows or rows[0] is None:
            log.warning(
                "per-passage parse results unknown: %r is in no shard of %s", pid, shard_dir
            )
            return None
        outcome = _outcome(rows, props)
        if outcome is None:
            log.warning(
                "per-passage parse results unknown: the shards of %s do not match %s (%r)",
                shard_dir,
                propositions_path,
                pid,
            )
            return None
        out[pid] = outcome
    return out


def _outcome(rows: Sequence[Record], props: Sequence[str]) -> dict[str, Any] | None:
    """A passage's parse outcome from the shard rows of its inputs (one, or one per sentence):
    the worst input's ("fallback" over "repaired" over "strict"; cut if any was). None when
    no input fell back and `props` is not their parsed outputs joined, or those with some
    left out (`min_shared_words` drops degenerate propositions, it never adds or rewrites
    one): stale shards."""
    kept: list[str] = []
    worst, reason, repairs, exact = "strict", None, [], True
    for row in rows:
        result = parse_propositions(row["raw"])
        used = result.ok and bool(result.propositions)
        if used:
            kept += list(result.propositions)
        else:  # a fallback's propositions come from the text, not the raw output
            exact = False
            worst, reason = "fallback", "unparseable" if not result.ok else "empty"
        if used and result.repaired and worst == "strict":
            worst = "repaired"
        repairs += result.repairs
    if exact and not _in_order(props, kept):
        return None
    return {
        "parse": worst,
        "fallback_reason": reason,
        "repairs": ";".join(repairs),
        "cut": any(bool(row.get("cut")) for row in rows),
    }


def _in_order(short: Sequence[str], long: Sequence[str]) -> bool:
    """Whether `short` is `long` with some items left out (order kept)."""
    rest = iter(long)
    return all(any(x == y for y in rest) for x in short)
