"""The questions of the articles a dataset keeps: `dataset.titles` over SQuAD's own JSON.

`article_question_ids(dataset)` is the set of question ids the question loader keeps (None:
no filter): the questions of the articles of `dataset.articles` (a SQuAD v1.1 JSON, titles
spelt as passages spell them by `squad_articles.passage_title`) that the title filter
(`corpus.titles.TitleFilter`, the corpus's own rule) keeps: `squad_articles`'
`article_question_ids`, the ids `article_questions` would keep, so the question file is read
once, by the loader.
"""

from __future__ import annotations

from densex.corpus.titles import TitleFilter
from densex.data import squad_articles
from densex.data.spec import DatasetSpec

__all__ = ["article_question_ids"]


def article_question_ids(dataset: DatasetSpec) -> set[str] | None:
    """The ids of the questions of the articles `dataset.titles` keeps, by the SQuAD JSON
    `dataset.articles` (None: no filter). An included title that is no article of the JSON is
    a `DataError`; the filter reads a JSONL question file (`format: jsonl`) with SQuAD's
    question ids."""
    flt = TitleFilter.from_spec(dataset.titles, "dataset.titles")
    if not flt.active:
        return None
    if dataset.format != "jsonl" or not dataset.articles:
        raise ValueError(
            f"dataset {dataset.name!r}: dataset.titles filters a JSONL question file"
            f" (format jsonl, got {dataset.format}) by the SQuAD JSON dataset.articles"
        )
    every = squad_articles.article_titles(dataset.articles)
    flt.check_seen(every, dataset.articles)
    kept = [t for t in every if flt.keep(t)]
    return squad_articles.article_question_ids(dataset.articles, kept)
