"""Per-sentence propositionizing (`propositionizer.per_sentence`): each sentence of a passage is
one model input (title and section, and with `context_sentences` the passage's earlier sentences
as marked, read-only context: `pairs.format_source`), and a passage's propositions are its
sentences' propositions in order.

Input units are ids `{passage_id}::s{k}` (k = the sentence's index in the passage), so the
shards, their resume and the quality report's per-passage parse outcomes stay keyed by id.
Why a model runs per sentence: docs/architecture.md, "Per-sentence propositionizing".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from densex.utils.records import Record

__all__ = ["UNIT_SEP", "context_of", "passage_units", "sentence_units"]

UNIT_SEP = "::s"  # unit id = passage id + UNIT_SEP + sentence index


def context_of(sentences: Sequence[str], k: int, window: int) -> str | None:
    """The read-only context of sentence `k`: the `window` sentences before it (-1: all of
    the passage's earlier sentences; 0: none, None is returned), joined by spaces."""
    if window == 0 or k == 0:
        return None
    return " ".join(sentences[:k] if window < 0 else sentences[max(0, k - window) : k])


def sentence_units(
    passages: Sequence[Record],
    split_many: Callable[[Iterable[str]], Iterator[list[str]]],
    context_sentences: int = 0,
) -> tuple[list[Record], list[int]]:
    """One input `{"id", "text", "title", "section"}` (+ `"context"` when it has one, see
    `context_of`) per sentence of every passage (`split_many`: texts -> their sentences, in
    order), and the index of each unit's passage. A passage the splitter finds no sentence
    in is one unit of its stripped text, so every passage has at least one unit."""
    units: list[Record] = []
    owners: list[int] = []
    for i, (p, sentences) in enumerate(zip(passages, split_many(p["text"] for p in passages))):
        sentences = sentences or [p["text"].strip()]
        for k, sentence in enumerate(sentences):
            unit = {"id": f"{p['id']}{UNIT_SEP}{k}", "text": sentence}
            unit.update(title=p.get("title"), section=p.get("section"))
            context = context_of(sentences, k, context_sentences)
            units.append({**unit, "context": context} if context else unit)
            owners.append(i)
    return units, owners


def passage_units(passage_id: str, unit_ids: set[str] | dict[str, object]) -> list[str]:
    """The unit ids of `passage_id` present in `unit_ids`, in sentence order (`::s0`,
    `::s1`, ... up to the first one missing)."""
    out: list[str] = []
    while f"{passage_id}{UNIT_SEP}{len(out)}" in unit_ids:
        out.append(f"{passage_id}{UNIT_SEP}{len(out)}")
    return out
