"""What a `conf/dataset/*.yaml` file says, as typed dataclasses (the dataset group's schema).

`DatasetSpec` states each default once; Hydra composes the dataset YAML files onto it
(`densex.pipelines.schemas`), so a file names only what differs and a misspelt key fails at
composition. The question readers take the composed node (`load_dataset_questions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from densex.corpus.spec import TitleFilterSpec
from densex.utils.config import check_choices

MATCHES = ("string", "regex")
ON_ERROR = ("raise", "skip")
QRELS_FORMATS = ("beir", "trec", "squad")


@dataclass
class QrelsSpec:
    """Gold passages of a question set: a BEIR/TREC qrels TSV or SQuAD's own JSON; `path`
    null: none (so `dataset.qrels.path=FILE` adds them from the command line)."""

    path: str | None = None
    format: str = "beir"  # beir | trec | squad

    def __post_init__(self) -> None:
        check_choices("qrels", format=(self.format, QRELS_FORMATS))


@dataclass
class DatasetSpec:
    """An evaluation question set: where it is, its format, how answers are matched."""

    name: str
    path: str  # a file, a folder (eq) or a hub id (format hf)
    # jsonl | dpr-jsonl | nq-open | dpr-tsv | webq-brmson | eq | squad | hf | beir
    format: str = "jsonl"
    match: str = "string"  # DPR has_answer: string (token match) | regex (CuratedTREC)
    split: str | None = None  # hf / beir split
    hf_name: str | None = None  # hf dataset config name
    hf_schema: str | None = None  # hf column layout; null: inferred from the hub id
    on_error: str = "raise"  # raise | skip (skipped records are counted and logged)
    limit: int | None = None  # the first N questions (quick checks)
    dir: str | None = None  # beir: the dataset folder the paths are relative to
    qrels: QrelsSpec = field(default_factory=QrelsSpec)
    # SQuAD v1.1 JSON of the questions (question id -> article): what `titles` filters by
    articles: str | None = None
    # the questions of these articles only (include / exclude, as `corpus.titles`; the
    # squad-train config follows the corpus's filter); applied before `limit`
    titles: TitleFilterSpec = field(default_factory=TitleFilterSpec)
    # answer recall within l words and EM@l also on the questions whose shortest answer has at
    # most this many words (`<metric>_short<N>` keys); null: on all questions only
    short_answer_words: int | None = None

    def __post_init__(self) -> None:
        check_choices(
            f"dataset {self.name!r}",
            match=(self.match, MATCHES),
            on_error=(self.on_error, ON_ERROR),
        )
        if self.short_answer_words is not None and self.short_answer_words < 1:
            raise ValueError(
                f"dataset {self.name!r}: short_answer_words must be >= 1 or null, got "
                f"{self.short_answer_words}"
            )
        filtered = self.titles.include is not None or self.titles.exclude is not None
        if filtered and not self.articles:
            raise ValueError(
                f"dataset {self.name!r}: dataset.titles needs dataset.articles, the SQuAD JSON"
                " that maps each question id to its article"
            )
