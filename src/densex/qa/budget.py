"""The paper's word budget: the reader sees the first l words of the retrieved units.

Counting words (whitespace tokens) rather than units makes granularities comparable: 100
words are one passage, about five sentences or about seven propositions.
"""

from __future__ import annotations

from collections.abc import Iterable


def words_of(unit_texts: Iterable[str], budget: int) -> list[str]:
    """The first `budget` whitespace words of the units, concatenated in rank order."""
    if budget < 0:
        raise ValueError(f"word budget must be >= 0, got {budget}")
    words: list[str] = []
    for text in unit_texts:
        need = budget - len(words)
        if need <= 0:
            break
        words.extend(text.split()[:need])
    return words


def first_words(unit_texts: Iterable[str], budget: int) -> str:
    """The retrieved units joined in rank order and cut after `budget` words.

    A unit cut mid-way keeps its first words; with fewer than `budget` words in all, all of
    them are kept. Whitespace inside and between units collapses to single spaces.
    """
    return " ".join(words_of(unit_texts, budget))
