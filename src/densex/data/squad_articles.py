"""Which SQuAD questions belong to which article: the questions of an article-level split.

A SQuAD JSON (`squad-dev-v1.1.json`, `squad-train-v1.1.json`) maps each question id to its
article's title as SQuAD spells it: underscores for spaces and, in SQuAD train, some titles
percent-encoded (`Bras%C3%ADlia`). Passages spell the decoded title with spaces (`Brasília`):
`passage_title` is the one rule between the two. Used to give an article-level split
(`propositionizer.pairs.split_articles`, a corpus title filter) its own questions.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from urllib.parse import unquote

from densex.utils.io import numbered_jsonl, read_json
from densex.utils.records import Record

__all__ = ["article_questions", "passage_title", "shortest_answer_words"]


def passage_title(squad_title: str) -> str:
    """A SQuAD JSON title as passages spell it: percent-decoded, underscores as spaces."""
    return unquote(squad_title).replace("_", " ")


def article_questions(
    squad_json: str | os.PathLike, questions: str | os.PathLike, titles: Collection[str]
) -> list[Record]:
    """The rows of `questions` (JSONL `{"id", "question", "answers"}`) whose SQuAD question id
    belongs to an article of `titles` (passage titles: decoded, spaces), in file order."""
    wanted = set(titles)
    qids = {
        qa["id"]
        for article in read_json(squad_json)["data"]
        if passage_title(article["title"]) in wanted
        for para in article["paragraphs"]
        for qa in para["qas"]
    }
    return [row for _, row in numbered_jsonl(questions) if row["id"] in qids]


def shortest_answer_words(answers: Collection[str]) -> int:
    """The number of whitespace-separated words of a question's shortest answer (0: none).

    SQuAD train has one answer per question, often a clause; metrics that look for the answer
    inside a unit's own text (answer recall within l words, EM@l) are judged on the questions
    whose shortest answer has at most a few words, so the two SQuAD sets compare."""
    return min((len(a.split()) for a in answers), default=0)
