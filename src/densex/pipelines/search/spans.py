"""Where a unit sits inside its passage, and where an answer string occurs in a text.

Contract: `unit_span(unit_text, passage_text)` is the character span `(start, end)` of the
passage that the unit came from: the exact occurrence when the unit is a substring of the
passage (passages and sentences), else the best-matching span (propositions are rewritten
and decontextualised, so they are rarely substrings): the contiguous run of passage words
that maximises matched-minus-penalised words (Kadane's maximum-sum subarray over per-word
weights: +1 for a passage word the unit contains, +`FUNCTION` for a function word it contains,
-`MISS` otherwise), None when no word matches. `answer_spans(text, answers)` gives the case-insensitive occurrences of each answer
at word boundaries, sorted, overlaps merged. Both are linear in the passage length and touch
only the passages of returned hits.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_WORD = re.compile(r"\w+")
# a passage word missing from the unit costs this much: spans bridge short gaps of
# function words or rephrasing, but not a clause the proposition does not contain
MISS = 0.6
# a shared function word ("a", "in", "the") is weak evidence: it may not extend a span alone
FUNCTION = 0.1
FUNCTION_WORDS = frozenset((
    "a", "an", "the", "of", "in", "on", "at", "to", "for", "from", "by", "with", "and", "or",
    "but", "is", "are", "was", "were", "be", "been", "it", "its", "this", "that", "these",
    "those", "as", "which", "who", "whom", "whose",
))  # fmt: skip


def unit_span(unit_text: str, passage_text: str) -> tuple[int, int] | None:
    """The span of `passage_text` that `unit_text` matches (see the module doc)."""
    unit = unit_text.strip()
    if not unit or not passage_text:
        return None
    start = passage_text.find(unit)
    if start >= 0:
        return start, start + len(unit)
    wanted = {w.lower() for w in _WORD.findall(unit)}
    best, best_span = 0.0, None
    run, run_start = 0.0, 0
    for m in _WORD.finditer(passage_text):
        word = m.group().lower()
        weight = -MISS if word not in wanted else FUNCTION if word in FUNCTION_WORDS else 1.0
        if run <= 0:
            run, run_start = 0.0, m.start()
        run += weight
        # a tie extends the best run (it reaches one more matched word), never moves it
        if run > best or (best_span and run == best and run_start == best_span[0]):
            best, best_span = run, (run_start, m.end())
    return best_span


def answer_spans(text: str, answers: Sequence[str]) -> list[tuple[int, int]]:
    """Case-insensitive occurrences of each answer in `text` at word boundaries, merged."""
    spans = []
    for answer in answers:
        a = str(answer).strip()
        if not a:
            continue
        pattern = re.compile(r"(?<!\w)" + re.escape(a) + r"(?!\w)", re.IGNORECASE)
        spans.extend(m.span() for m in pattern.finditer(text))
    merged: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(e, merged[-1][1]))
        else:
            merged.append((s, e))
    return merged
