"""Word-level quality measures of a passage's propositions (no model needed).

- **content words**: the distinct lowercased word tokens of a text (maximal runs of Unicode
  letters/digits after NFKC normalisation, so "Denver's" gives "denver" and "s", and "US$3"
  gives "us" and "3") minus spaCy's English stop-word list (`spacy.lang.en.stop_words`,
  326 words) and minus one-letter tokens that are not digits (the "s" of a possessive, the
  "t" of "don't"). Exact tokens by default, so "ended" and "end" are different words; with
  a stemmer (`stemmer("english")`, PyStemmer's Snowball, as the bm25 retriever's option)
  content words are compared as stems, after the stop words are removed.
- **coverage**: the share of the passage's content words found in some proposition
  (distinct words; None for a passage without content words).
- **unsupported**: the share of the propositions' content words found in neither the
  passage nor its title/section (distinct words; a hallucination proxy; None when the
  propositions have no content words, e.g. an empty prediction).
- **words per proposition**: whitespace words, as the paper's Table 1 counts them.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = [
    "STOPWORDS_NAME",
    "PropositionWordStats",
    "content_words",
    "coverage",
    "snowball",
    "stemmer",
    "stopwords",
    "unsupported",
    "word_stats",
]

STOPWORDS_NAME = "spacy-en"  # spacy.lang.en.stop_words.STOP_WORDS
_WORD = re.compile(r"[^\W_]+")

Stem = Callable[[list[str]], list[str]]


def snowball(name: str | None) -> Any:
    """PyStemmer's `Stemmer.Stemmer` for a Snowball language (e.g. "english"); None for None.
    `stemWords` stems a list (content words), `stemWord` one word (what bm25s calls)."""
    if not name:
        return None
    try:
        import Stemmer
    except ImportError as e:
        raise ImportError("stemming needs PyStemmer: pip install PyStemmer") from e
    return Stemmer.Stemmer(name)


def stemmer(name: str | None) -> Stem | None:
    """PyStemmer's `stemWords` (a list of words -> their stems) for a Snowball language; None
    for None."""
    snow = snowball(name)
    return snow.stemWords if snow is not None else None


@lru_cache(maxsize=1)
def stopwords() -> frozenset[str]:
    """spaCy's English stop words, lowercased, with curly apostrophes made straight."""
    from spacy.lang.en.stop_words import STOP_WORDS

    return frozenset(w.lower().replace("\u2019", "'") for w in STOP_WORDS)


def content_words(
    text: str, stop: frozenset[str] | None = None, stem: Stem | None = None
) -> set[str]:
    """The distinct content words of `text` (see the module docstring), stemmed by `stem`."""
    stop = stopwords() if stop is None else stop
    tokens = _WORD.findall(unicodedata.normalize("NFKC", text).lower())
    words = [t for t in tokens if t not in stop and (len(t) > 1 or t.isdigit())]
    return set(stem(words) if stem is not None else words)


def _union(texts: Iterable[str], stop: frozenset[str] | None, stem: Stem | None = None) -> set[str]:
    out: set[str] = set()
    for t in texts:
        out |= content_words(t, stop, stem)
    return out


def coverage(
    passage_text: str,
    propositions: Sequence[str],
    stop: frozenset[str] | None = None,
    stem: Stem | None = None,
) -> float | None:
    """Share of the passage's content words that occur in some proposition (None: no words)."""
    passage = content_words(passage_text, stop, stem)
    if not passage:
        return None
    return len(passage & _union(propositions, stop, stem)) / len(passage)


def unsupported(
    propositions: Sequence[str],
    passage_text: str,
    context: Sequence[str] = (),
    stop: frozenset[str] | None = None,
    stem: Stem | None = None,
) -> float | None:
    """Share of the propositions' content words in neither the passage nor `context` (the
    title, section); None when the propositions have no content words."""
    words = _union(propositions, stop, stem)
    if not words:
        return None
    support = content_words(passage_text, stop, stem) | _union(context, stop, stem)
    return len(words - support) / len(words)


@dataclass(frozen=True)
class PropositionWordStats:
    """Word-level measures of one passage's propositions (see the module docstring)."""

    n_propositions: int
    n_words: int  # whitespace words over all propositions
    words_per_proposition: float | None
    passage_content_words: int
    proposition_content_words: int
    coverage: float | None
    unsupported: float | None
    unsupported_words: tuple[str, ...]  # sorted


def word_stats(
    passage_text: str,
    propositions: Sequence[str],
    context: Sequence[str] = (),
    stop: frozenset[str] | None = None,
    stem: Stem | None = None,
) -> PropositionWordStats:
    """Every word-level measure of one passage's propositions in one pass."""
    stop = stopwords() if stop is None else stop
    passage = content_words(passage_text, stop, stem)
    words = _union(propositions, stop, stem)
    missing = words - passage - _union(context, stop, stem)
    n_words = sum(len(p.split()) for p in propositions)
    return PropositionWordStats(
        n_propositions=len(propositions),
        n_words=n_words,
        words_per_proposition=n_words / len(propositions) if propositions else None,
        passage_content_words=len(passage),
        proposition_content_words=len(words),
        coverage=len(passage & words) / len(passage) if passage else None,
        unsupported=len(missing) / len(words) if words else None,
        unsupported_words=tuple(sorted(missing)),
    )
