"""Which SQuAD questions belong to which article: the questions of an article-level split.

squad-open's `questions.jsonl` rows carry the SQuAD question id, not the article; the official
`squad-dev-v1.1.json` maps each question id to its article's title (underscores for spaces,
as squad-open's passages spell titles with spaces). Used to give the propositionizer's
validation and test articles (`propositionizer.pairs.split_articles`) their own questions.
"""

from __future__ import annotations

import os
from collections.abc import Collection

from densex.utils.io import numbered_jsonl, read_json
from densex.utils.records import Record

__all__ = ["article_questions"]


def article_questions(
    squad_json: str | os.PathLike, questions: str | os.PathLike, titles: Collection[str]
) -> list[Record]:
    """The rows of `questions` (JSONL `{"id", "question", "answers"}`) whose SQuAD question id
    belongs to an article of `titles` (passage titles: spaces, not underscores), in file order."""
    wanted = set(titles)
    qids = {
        qa["id"]
        for article in read_json(squad_json)["data"]
        if article["title"].replace("_", " ") in wanted
        for para in article["paragraphs"]
        for qa in para["qas"]
    }
    return [row for _, row in numbered_jsonl(questions) if row["id"] in qids]
