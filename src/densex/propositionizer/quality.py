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
    "fallback_reason": None | "unparseable" | "empty" | "unsupported", "repairs": "a;b",
    "cut": bool}`,
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
    settings = manifest.get("settings") or {}
    out = _outcomes(raws, predictions, bool(settings.get("per_sentence")),
                    bool(settings.get("min_shared_words")), shard_dir)  # fmt: skip
    dropped = sum(o["fallback_reason"] == "unsupported" for o in (out or {}).values())
    if out is not None and dropped > (manifest.get("fallback_reasons") or {}).get("unsupported", 0):
        log.warning("per-passage parse results unknown: the shards of %s do not match %s (more "
                    "sentences filtered away than the generation counted)",
                    shard_dir, propositions_path)  # fmt: skip
        return None
    return out


def _outcomes(
    raws: Mapping[str, Record], predictions: Mapping[str, Sequence[str]], per_sentence: bool,
    filtered: bool, shard_dir: Path,
) -> dict[str, dict[str, Any]] | None:  # fmt: skip
    """`_outcome` of every passage of `predictions`; None (the passage logged) when one is in
    no shard or does not match its shard rows."""
    out: dict[str, dict[str, Any]] = {}
    for pid, props in predictions.items():
        rows = [raws[u] for u in passage_units(pid, raws)] if per_sentence else [raws.get(pid)]
        if not rows or rows[0] is None:
            log.warning(
                "per-passage parse results unknown: %r is in no shard of %s", pid, shard_dir
            )
            return None
        outcome = _outcome(rows, props, filtered)
        if outcome is None:
            log.warning("per-passage parse results unknown: passage %r does not match its raw "
                        "outputs in %s", pid, shard_dir)  # fmt: skip
            return None
        out[pid] = outcome
    return out


def _outcome(rows: Sequence[Record], props: Sequence[str], filtered: bool) -> dict[str, Any] | None:
    """A passage's parse outcome from the shard rows of its inputs (one, or one per sentence):
    the worst input's ("fallback" over "repaired" over "strict"; cut if any was). `props` must
    be the inputs' parsed outputs joined, some left out (`min_shared_words` drops degenerate
    propositions; it never adds or rewrites one), except where an input fell back: its parse
    failed ("fallback") or, with the filter on (`filtered`), every proposition it parsed to
    was dropped (its text stands in; the parse counts as done, reason "unsupported"; the
    inputs after it are not checked). None when that does not hold: stale shards."""
    worst, reason, repairs, exact = "strict", None, [], True
    rest = iter(props)
    for row in rows:
        result = parse_propositions(row["raw"])
        if not (result.ok and result.propositions):  # from the text, not the raw output
            exact = False
            worst, reason = "fallback", "unparseable" if not result.ok else "empty"
        elif exact:
            ahead = list(rest)
            matched = _matched(ahead, list(result.propositions))
            if matched:  # what it kept ends at the last match; the next input reads on
                rest = iter(ahead[matched:])
            elif filtered:  # all dropped: its text stands in, the rest cannot be aligned
                exact, reason = False, reason or "unsupported"
                rest = iter(ahead)
            else:
                return None
        if result.ok and result.repaired and worst == "strict":
            worst = "repaired"
        repairs += result.repairs
    if exact and next(rest, None) is not None:
        return None
    return {
        "parse": worst,
        "fallback_reason": reason,
        "repairs": ";".join(repairs),
        "cut": any(bool(row.get("cut")) for row in rows),
    }


def _matched(props: Sequence[str], parsed: Sequence[str]) -> int:
    """How many leading items of `props` are `parsed` with some left out (order kept): the
    longest prefix of `props` that is a subsequence of `parsed`."""
    n, i = 0, 0
    for x in props:
        while i < len(parsed) and parsed[i] != x:
            i += 1
        if i == len(parsed):
            break
        n, i = n + 1, i + 1
    return n
