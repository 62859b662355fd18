"""Where a unit sits inside its passage, and where an answer string occurs in a text.

Contract: `unit_span(unit_text, passage_text, title="")` is the character span `(start, end)`
of the passage that the unit came from:
- the exact occurrence when the unit is a substring of the passage (passages and sentences);
- else (propositions are rewritten and decontextualised, so they are rarely substrings) a span
  inside the unit's sentence: the passage sentence holding the most of the unit's content
  words (`metrics.propositions.content_words`: stop words aside), the words of `title` counted
  only to break ties (decontextualisation puts the title's entity into the propositions of
  every sentence, so they say nothing about which sentence a proposition restates; the same
  rule as the propositionizer's sentence pairs); on a tie the earlier sentence. The span runs
  from the first to the last of the unit's content words in that sentence (title words
  included), widened over the unit's words right beside it (the "The" of "The SS Carrow
  Meridian"), so "The SS Carrow Meridian was built in 1897." spans "The SS Carrow Meridian
  was a steam-powered passenger and cargo ship built in 1897" and not the words of a
  neighbouring sentence. None when no content word of the unit is in the passage.
Sentences end at `.`, `!` or `?` (closing quotes or brackets after it) followed by white
space: a display rule, so a split after an abbreviation only shortens a span.
`answer_spans(text, answers)` gives the case-insensitive occurrences of each answer at word
boundaries, sorted, overlaps merged. Both are linear in the passage length and touch only the
passages of returned hits.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Sequence

from densex.metrics.propositions import content_words, stopwords

# a word: a run of letters/digits, as `content_words` tokenises
_WORD = re.compile(r"[^\W_]+")
# a sentence ends at . ! or ? (closing quotes/brackets after it) followed by white space
_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*\s+")


def _norm(word: str) -> str:
    return unicodedata.normalize("NFKC", word).lower()


def unit_span(unit_text: str, passage_text: str, title: str = "") -> tuple[int, int] | None:
    """The span of `passage_text` that `unit_text` matches (see the module doc)."""
    unit = unit_text.strip()
    if not unit or not passage_text:
        return None
    start = passage_text.find(unit)
    if start >= 0:
        return start, start + len(unit)
    wanted = content_words(unit)
    if not wanted:
        return None
    entity = content_words(title) if title else set()
    stop = stopwords()
    ends = [m.end() for m in _SENTENCE_END.finditer(passage_text)]
    words = [(m.start(), m.end(), _norm(m.group()), bisect_right(ends, m.start()))
             for m in _WORD.finditer(passage_text)]  # fmt: skip
    seen: dict[int, tuple[set[str], set[str]]] = {}  # sentence -> (its words, its title words)
    for _, _, w, s in words:
        if w in wanted and w not in stop:
            own, ent = seen.setdefault(s, (set(), set()))
            (ent if w in entity else own).add(w)
    if not seen:
        return None
    best = max(seen, key=lambda s: (len(seen[s][0]), len(seen[s][1]), -s))
    core = seen[best][0] or seen[best][1]  # the title's words only when nothing else matched
    hits = [i for i, (_, _, w, s) in enumerate(words) if s == best and w in core]
    first, last = hits[0], hits[-1]
    unit_words = {_norm(w) for w in _WORD.findall(unit)}

    def widens(i: int, stop_too: bool) -> bool:
        return 0 <= i < len(words) and words[i][3] == best and words[i][2] in unit_words and (
            stop_too or words[i][2] not in stop)  # fmt: skip

    while widens(first - 1, True):  # "The SS Carrow Meridian", "In 1312"
        first -= 1
    while widens(last + 1, False):  # never a trailing "the"
        last += 1
    return _balanced(passage_text, words[first][0], words[last][1])


_PAIRS = (("(", ")"), ("[", "]"), ('"', '"'), ("\u201c", "\u201d"))


def _balanced(text: str, start: int, end: int) -> tuple[int, int]:
    """`[start, end)` widened by one character over a bracket or quote it opens or closes."""
    for left, right in _PAIRS:
        piece = text[start:end]
        opened = piece.count(left) - piece.count(right) if left != right else piece.count(left) % 2
        if opened > 0 and text[end : end + 1] == right:
            end += 1
        elif (opened < 0 or (left == right and opened)) and text[start - 1 : start] == left:
            start -= 1
    return start, end


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
