"""Answer recall within the first l retrieved words (the paper's Figures 4 and 7).

For each question we find the smallest l at which DPR's `has_answer` holds on the first l
words, then a cumulative histogram gives the whole curve l = 0..max_words at once.

String matching is DPR's: the text and each answer are NFD-normalised and split by the
`SimpleTokenizer` (uncased; `metrics.answers.dpr_tokens`, shared with `has_answer`), and an
answer matches where its tokens occur contiguously.
That tokenizer never joins characters across whitespace, so the tokens of the first l words
are a prefix of the tokens of all words: one scan over the token stream finds the smallest
l exactly, with no call per l. Regex answers (CuratedTREC) are searched by bisection on l
with `has_answer` itself (a match in a prefix stays a match when words are appended).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from densex.metrics.answers import dpr_tokens, has_answer
from densex.qa.budget import words_of
from densex.utils.progress import track


def first_answer_word(
    words: Sequence[str], answers: Sequence[str], match_type: str = "string"
) -> int | None:
    """Smallest l such that `has_answer(answers, " ".join(words[:l]))`, or None if none."""
    if match_type == "regex":
        return _first_regex_word(words, answers)
    if match_type != "string":
        raise ValueError(f"match_type must be 'string' or 'regex', got {match_type!r}")
    stream: list[str] = []  # tokens of all words, in order
    ends: list[int] = []  # ends[t] = number of words needed to include token t
    for i, word in enumerate(words):
        toks = dpr_tokens(word)
        stream.extend(toks)
        ends.extend([i + 1] * len(toks))
    best: int | None = None
    for answer in answers:
        target = dpr_tokens(answer)
        if not target:  # has_answer ignores answers with no tokens ("", "...")
            continue
        n, first = len(target), target[0]
        for t in range(len(stream) - n + 1):
            if stream[t] == first and tuple(stream[t : t + n]) == target:
                end = ends[t + n - 1]
                if best is None or end < best:
                    best = end
                break  # later occurrences end later
    return best


def _first_regex_word(words: Sequence[str], answers: Sequence[str]) -> int | None:
    if not has_answer(answers, " ".join(words), match_type="regex"):
        return None
    lo, hi = 0, len(words)  # invariant: the answer is in words[:hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if has_answer(answers, " ".join(words[:mid]), match_type="regex"):
            hi = mid
        else:
            lo = mid + 1
    return hi


def first_answer_words(
    ranked_unit_texts: Sequence[Sequence[str]],
    answers: Sequence[Sequence[str]],
    max_words: int,
    match_type: str = "string",
) -> list[int | None]:
    """Per question, the smallest l <= max_words whose first l words contain an answer."""
    if len(ranked_unit_texts) != len(answers):
        raise ValueError(f"{len(ranked_unit_texts)} retrievals but {len(answers)} answer lists")
    pairs = zip(ranked_unit_texts, answers)
    return [
        first_answer_word(words_of(units, max_words), ans, match_type)
        for units, ans in track(pairs, "answer recall by words", len(answers), "questions")
    ]


def recall_curve(first_words_needed: Sequence[int | None], max_words: int) -> np.ndarray:
    """Percent of questions answered within l words, for l = 0..max_words (index = l)."""
    hist = np.zeros(max_words + 1, dtype=np.int64)
    for l_min in first_words_needed:
        if l_min is not None and l_min <= max_words:
            hist[l_min] += 1
    n = max(len(first_words_needed), 1)
    return 100.0 * np.cumsum(hist) / n


def answer_recall_by_words(
    ranked_unit_texts: Sequence[Sequence[str]],
    answers: Sequence[Sequence[str]],
    max_words: int = 500,
    match_type: str = "string",
) -> np.ndarray:
    """The answer-recall curve: entry l is the percent of questions with an answer in l words."""
    return recall_curve(
        first_answer_words(ranked_unit_texts, answers, max_words, match_type), max_words
    )
