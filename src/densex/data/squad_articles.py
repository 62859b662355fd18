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
from pathlib import Path
from urllib.parse import unquote

from densex.utils.io import numbered_jsonl, read_json
from densex.utils.records import Record

__all__ = [
    "article_question_ids",
    "article_questions",
    "article_titles",
    "is_short_answer",
    "passage_title",
    "shortest_answer_words",
]


def passage_title(squad_title: str) -> str:
    """A SQuAD JSON title as passages spell it: percent-decoded, underscores as spaces."""
    return unquote(squad_title).replace("_", " ")


def article_questions(
    squad_json: str | os.PathLike, questions: str | os.PathLike, titles: Collection[str]
) -> list[Record]:
    """The rows of `questions` (JSONL `{"id", "question", "answers"}`) whose SQuAD question id
    belongs to an article of `titles` (passage titles: decoded, spaces), in file order."""
    qids = article_question_ids(squad_json, titles)
    return [row for _, row in numbered_jsonl(questions) if row["id"] in qids]


_articles_memo: dict[tuple[str, int, int], dict[str, tuple[str, ...]]] = {}


def _article_qids(squad_json: str | os.PathLike) -> dict[str, tuple[str, ...]]:
    """`{passage title: its question ids}` of a SQuAD JSON, in file order; memoised on the
    file's (path, size, mtime) within a process (a sweep's checks and cells ask again; SQuAD
    train's JSON is 30 MB, its ids 87,599 short strings)."""
    path = Path(squad_json).resolve()
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _articles_memo:
        _articles_memo[key] = {
            passage_title(article["title"]): tuple(
                qa["id"] for para in article["paragraphs"] for qa in para["qas"]
            )
            for article in read_json(path)["data"]
        }
    return _articles_memo[key]


def article_titles(squad_json: str | os.PathLike) -> list[str]:
    """The articles of a SQuAD JSON as passages spell their titles (`passage_title`), in file
    order."""
    return list(_article_qids(squad_json))


def article_question_ids(squad_json: str | os.PathLike, titles: Collection[str]) -> set[str]:
    """The ids of the questions of the articles of `titles` (passage titles) in a SQuAD JSON:
    the ids `article_questions` keeps, without reading a questions file."""
    by_title = _article_qids(squad_json)
    return {qid for title in set(titles) for qid in by_title.get(title, ())}


def shortest_answer_words(answers: Collection[str]) -> int:
    """The number of whitespace-separated words of a question's shortest answer (0: none).

    SQuAD train has one answer per question, often a clause; metrics that look for the answer
    inside a unit's own text (answer recall within l words, EM@l) are judged on the questions
    whose shortest answer has at most a few words, so the two SQuAD sets compare."""
    return min((len(a.split()) for a in answers), default=0)


def is_short_answer(answers: Collection[str], words: int) -> bool:
    """Whether a question's shortest answer has 1 to `words` words (`shortest_answer_words`):
    the questions the short-answer metrics are judged on."""
    return 0 < shortest_answer_words(answers) <= int(words)
