"""What stands in for an unrecoverable output, and the counts for the manifest.

`resolve_output` parses a raw output (`parse.parse_propositions`) and, when nothing usable
comes out, replaces it with the configured fallback (the passage's sentences, the passage
itself, or nothing), saying why; `ParseStats` counts every repair, dropped item and fallback.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from densex.metrics.propositions import content_words
from densex.propositionizer.parse import ParseLimits, ParseResult, parse_propositions

__all__ = [
    "FALLBACK_MODES",
    "ParseStats",
    "Resolved",
    "SentenceSplitter",
    "fallback_propositions",
    "resolve_output",
    "supported",
]

FALLBACK_MODES = ("sentences", "passage", "empty")


class SentenceSplitter:
    """spaCy sentence splitting for fallbacks and per-sentence inputs or pairs, loaded on first
    use (most runs never need it).

    Uses `densex.corpus.segment.load_sentencizer`, i.e. `spacy_model` when installed, else
    spaCy's rule-based sentencizer, the same splitter as the sentence units.
    """

    def __init__(self, spacy_model: str | None = "en_core_web_lg"):
        self.spacy_model = spacy_model
        self._nlp = None

    def _pipeline(self) -> Any:
        # lazy: spaCy (~2 s) is needed only when an output falls back to sentences
        from densex.corpus.segment import load_sentencizer

        if self._nlp is None:
            self._nlp = load_sentencizer(self.spacy_model or "")
        return self._nlp

    def __call__(self, text: str) -> list[str]:
        from densex.corpus.segment import split_sentences

        return split_sentences(text, self._pipeline())

    def many(self, texts: Iterable[str]) -> Iterator[list[str]]:
        """The sentences of each text, in order (spaCy's batched `pipe`)."""
        from densex.corpus.segment import split_sentences_many

        return split_sentences_many(texts, self._pipeline())


def fallback_propositions(
    passage_text: str, mode: str, split: Callable[[str], list[str]] | None = None
) -> list[str]:
    """What stands in for an unrecoverable output: sentences, the passage, or nothing."""
    if mode == "sentences":
        sentences = (split or SentenceSplitter())(passage_text)
        return sentences or ([passage_text.strip()] if passage_text.strip() else [])
    if mode == "passage":
        return [passage_text.strip()] if passage_text.strip() else []
    if mode == "empty":
        return []
    raise ValueError(f"unknown fallback {mode!r}; expected one of {FALLBACK_MODES}")


@dataclass(frozen=True)
class Resolved:
    """The propositions kept for one passage and how they were obtained."""

    propositions: list[str]
    result: ParseResult
    fallback: str | None = None  # the fallback mode used, if any
    reason: str | None = None  # why: "unparseable" | "empty" | "rejected"


def supported(propositions: list[str], text: str, title: str, min_shared: int) -> list[str]:
    """The propositions sharing at least `min_shared` content words with `text` (the input
    they were written for), the title's words left out (`min_shared` 0: all): a degenerate
    output ("The Immune system is a a a.", the title copied over and over) shares none."""
    if min_shared <= 0:
        return propositions
    title_words = content_words(title)
    own = content_words(text) - title_words
    return [p for p in propositions if len((content_words(p) - title_words) & own) >= min_shared]


def resolve_output(
    raw: str | None,
    passage_text: str,
    fallback: str = "sentences",
    split: Callable[[str], list[str]] | None = None,
    limits: ParseLimits | None = None,
    min_shared: int = 0,
    title: str = "",
) -> Resolved:
    """Parse `raw` (within `limits`), keep the `supported` propositions (`min_shared` 0: all);
    if nothing usable comes out, use the fallback (and say why: "unparseable", "empty",
    "rejected" or "unsupported")."""
    if fallback not in FALLBACK_MODES:
        raise ValueError(f"unknown fallback {fallback!r}; expected one of {FALLBACK_MODES}")
    result = parse_propositions(raw, limits)
    kept = supported(list(result.propositions), passage_text, title, min_shared)
    if result.ok and kept:
        return Resolved(kept, result)
    reason = "rejected" if result.rejected else "unparseable" if not result.ok else "empty"
    if result.ok and result.propositions:
        reason = "unsupported"
    return Resolved(fallback_propositions(passage_text, fallback, split), result, fallback, reason)


@dataclass
class ParseStats:
    """Counts for the manifest. parsed_strict + repaired + unparseable == passages."""

    passages: int = 0
    parsed_strict: int = 0
    repaired: int = 0
    unparseable: int = 0
    items_dropped: int = 0
    propositions: int = 0
    repairs: Counter = field(default_factory=Counter)
    fallbacks: Counter = field(default_factory=Counter)
    fallback_reasons: Counter = field(default_factory=Counter)
    rejected: Counter = field(default_factory=Counter)  # by kind: too_long|too_deep|too_many
    too_long_items: int = 0

    def add(self, r: Resolved) -> None:
        self.passages += 1
        self.parsed_strict += int(r.result.ok and not r.result.repaired)
        self.repaired += int(r.result.ok and r.result.repaired)
        self.unparseable += int(not r.result.ok)
        self.items_dropped += r.result.dropped
        self.propositions += len(r.propositions)
        self.repairs.update(r.result.repairs)
        self.too_long_items += r.result.too_long_items
        if r.result.rejected:
            self.rejected[r.result.rejected] += 1
        if r.fallback is not None:
            self.fallbacks[r.fallback] += 1
            self.fallback_reasons[r.reason] += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "passages": self.passages,
            "parsed_strict": self.parsed_strict,
            "repaired": self.repaired,
            "unparseable": self.unparseable,
            # share of outputs that parsed as a JSON list (strictly or after repair)
            "parse_rate": (self.parsed_strict + self.repaired) / self.passages
            if self.passages
            else 0.0,
            "fallbacks": dict(sorted(self.fallbacks.items())),
            "fallback_total": sum(self.fallbacks.values()),
            "fallback_reasons": dict(sorted(self.fallback_reasons.items())),
            "repairs": dict(sorted(self.repairs.items())),
            "items_dropped": self.items_dropped,
            "rejected": dict(sorted(self.rejected.items())),
            "rejected_total": sum(self.rejected.values()),
            "too_long_items": self.too_long_items,
            "propositions": self.propositions,
        }
