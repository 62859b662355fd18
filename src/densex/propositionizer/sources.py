"""Training pairs from several sources of teacher propositions, split and ordered by article.

A source (`PairSource`, one entry of `data.sources`) is a passages + propositions JSONL pair in
squad-open's layout (`pairs.load_squad_open_pairs`; `partial` when its propositions cover some
articles only, as squad-train's), with the SQuAD JSON and questions that give its articles
their questions, and its own article split: `split_articles` (SHA-1 of the title, b in
[0, 1)) at the source's `test_fraction` and `val_fraction`. Every source goes through the same
reader, split rule and, in the data module, the same sentence alignment, context format and
filters; only the fractions differ. Sources must not share an article (a title is one split).

`first_articles` keeps the first N training articles in a fixed order, the SHA-1 of
`ORDER_SALT + title` (salted, so that the order is independent of the split's hash and a
prefix of it draws every source in proportion): runs on 27, 80 and all articles train on
nested sets and differ only in the training data.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from densex.data.squad_articles import article_questions, is_short_answer
from densex.propositionizer.pairs import load_squad_open_pairs, split_articles
from densex.utils.records import Record

__all__ = [
    "ORDER_SALT",
    "SHORT_ANSWER_WORDS",
    "PairSource",
    "SourceSplits",
    "article_rank",
    "first_articles",
    "read_sources",
    "source_questions",
    "split_sources",
]

ORDER_SALT = "densex/train-articles/"
# a question is "short" when its shortest answer has 1 to this many words: answer recall within
# l words is judged on those (SQuAD train has one answer per question, often a clause)
SHORT_ANSWER_WORDS = 5


@dataclass(frozen=True)
class PairSource:
    """One source of teacher pairs (`data.sources[i]`). `passages`, `propositions`: JSONL
    files joined on id; `partial`: the propositions cover some articles only; `squad_json`,
    `questions`: the SQuAD JSON naming each question's article and the questions JSONL (for
    retrieval validation and the held-out corpora; optional for training alone);
    `val_fraction`, `test_fraction`: this source's article split (`pairs.split_articles`)."""

    name: str
    passages: str
    propositions: str
    squad_json: str | None = None
    questions: str | None = None
    partial: bool = False
    val_fraction: float = 0.0
    test_fraction: float = 0.0

    def __post_init__(self) -> None:
        for key in ("val_fraction", "test_fraction"):
            if not 0.0 <= float(getattr(self, key)) < 1.0:
                raise ValueError(f"data.sources[{self.name}].{key} must be in [0, 1)")


@dataclass
class SourceSplits:
    """The pairs of every source by split, in source order (each source's in file order)."""

    train: list[dict[str, Any]]
    validation: list[dict[str, Any]]
    test: list[dict[str, Any]]


def read_sources(sources: Sequence[PairSource]) -> SourceSplits:
    """Each source's pairs (`pairs.load_squad_open_pairs`: a bad row is a located
    `DataError`), split by its fractions (`split_sources`)."""
    return split_sources(
        [(s, load_squad_open_pairs(s.passages, s.propositions, s.partial)) for s in sources]
    )


def split_sources(
    read: Sequence[tuple[PairSource, Sequence[dict[str, Any]]]],
) -> SourceSplits:
    """Each source's pairs (`read`: (source, its pairs) in source order) split by its
    fractions; the splits concatenated in source order. Two sources sharing an article title
    is a ValueError naming both."""
    out = SourceSplits([], [], [])
    owner: dict[str, str] = {}
    for source, pairs in read:
        for title in {p["title"] for p in pairs}:
            if owner.setdefault(title, source.name) != source.name:
                raise ValueError(
                    f"data.sources: article {title!r} is in {owner[title]!r} and {source.name!r}"
                )
        train, val, test = split_articles(pairs, source.val_fraction, source.test_fraction)
        out.train += train
        out.validation += val
        out.test += test
    return out


def article_rank(title: str) -> str:
    """The training-order key of an article (`first_articles`): SHA-1 of the salted title."""
    return hashlib.sha1((ORDER_SALT + title).encode("utf-8")).hexdigest()


def first_articles(pairs: Sequence[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The pairs of the first `n` articles of `pairs` by `article_rank` (pairs keep their
    order); fewer articles than `n` is a ValueError saying how many there are."""
    titles = sorted({p["title"] for p in pairs}, key=article_rank)
    if not 1 <= n <= len(titles):
        raise ValueError(f"data.train_articles={n}: the training split has {len(titles)} articles")
    keep = set(titles[:n])
    return [p for p in pairs if p["title"] in keep]


def source_questions(sources: Iterable[PairSource], titles: Iterable[str]) -> list[Record]:
    """The questions of the articles `titles` (passage titles) from every source with a
    `squad_json` and `questions` (`data.squad_articles.article_questions`, percent-encoded
    SQuAD titles decoded), in source then file order, each with `short`: its shortest answer
    has 1 to `SHORT_ANSWER_WORDS` words (`data.squad_articles.is_short_answer`)."""
    wanted = set(titles)
    out: list[Record] = []
    for source in sources:
        if source.squad_json and source.questions:
            out += article_questions(source.squad_json, source.questions, wanted)
    return [{**q, "short": is_short_answer(q["answers"], SHORT_ANSWER_WORDS)} for q in out]
