"""Per-sentence training pairs (`data.sentence_pairs`): each sentence of a pair's passage with the
teacher propositions aligned to it, in the source format that per-sentence propositionizing
(`sentence_inputs.py`, `propositionizer.per_sentence`) gives the model at inference.

A proposition is aligned to the sentence that holds the largest share of its content words
(`metrics.propositions.content_words`, the title's words left out: the teacher inserts the
title's entity into propositions of every sentence); on a tie the earlier sentence, and one
that shares no word goes with the previous proposition's sentence. Sentences left with no
proposition make no pair. Why: docs/architecture.md, "Per-sentence propositionizing".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from densex.metrics.propositions import content_words
from densex.propositionizer.pairs import format_source, format_target, split_source
from densex.propositionizer.sentence_inputs import UNIT_SEP, context_of

__all__ = ["align_propositions", "sentence_pairs"]


def align_propositions(
    propositions: Sequence[str], sentences: Sequence[str], title: str = ""
) -> list[list[str]]:
    """The propositions of each sentence (same order as `sentences`; see the module rule)."""
    skip = content_words(title)
    words = [content_words(s) for s in sentences]
    groups: list[list[str]] = [[] for _ in sentences]
    last = 0
    for prop in propositions:
        mine = content_words(prop) - skip
        shares = [len(mine & w) for w in words]
        best = max(range(len(sentences)), key=lambda k: (shares[k], -k))
        last = best if shares[best] > 0 else last
        groups[last].append(prop)
    return groups


def sentence_pairs(
    pairs: Sequence[dict[str, Any]],
    split_many: Callable[[Iterable[str]], Iterator[list[str]]],
    context_sentences: int = 0,
) -> list[dict[str, Any]]:
    """Per-sentence pairs `{"id": "{pair id}::s{k}", "title", "source", "target"}` of `pairs`
    (`pairs.py`'s format; `split_many`: texts -> their sentences), each source with the
    earlier sentences of its passage as context (`sentence_inputs.context_of`, the same
    window as inference's `propositionizer.context_sentences`). A pair whose source is not
    the `format_source` string is a ValueError naming it."""
    parts = []
    for p in pairs:
        part = split_source(p["source"])
        if part is None:
            raise ValueError(f"pair {p['id']!r}: source is not 'Title: .. Section: .. Content: ..'")
        parts.append(part)
    out: list[dict[str, Any]] = []
    for p, (title, section, _), sentences in zip(
        pairs, parts, split_many(text for _, _, text in parts)
    ):
        groups = align_propositions(json.loads(p["target"]), sentences, title)
        for k, (sentence, group) in enumerate(zip(sentences, groups)):
            if group:
                out.append(
                    {
                        "id": f"{p['id']}{UNIT_SEP}{k}",
                        "title": p["title"],
                        "source": format_source(
                            title, section, sentence, context_of(sentences, k, context_sentences)
                        ),
                        "target": format_target(group),
                    }
                )
    return out
