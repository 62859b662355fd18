"""What a `conf/corpus/*.yaml` file says, as typed dataclasses (the corpus group's schema).

`CorpusSpec` states each default once; Hydra composes the corpus YAML files onto it
(`densex.pipelines.schemas`), so a file names only what differs and a misspelt key fails at
composition naming the file. A corpus comes from one of three sources, tried in this order:
ready-made unit collections (`sources`, FactoidWiki), a passages file (`passages`), or
documents segmented into 100-word passages (`documents` + `documents_format` and its reader's
column keys). `titles` keeps some articles only (`TitleFilterSpec`, read by `corpus.titles`).
The units stage takes the composed node (`corpus.units.build_units`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from densex.utils.config import check_choices

GRANULARITIES = ("passage", "sentence", "proposition")
DOCUMENT_FORMATS = ("squad", "jsonl", "hf")
ON_ERROR = ("raise", "skip")


@dataclass
class SegmentationSpec:
    """Appendix A's passages: greedy chunks of whole sentences, a short tail merged back."""

    max_words: int = 100
    min_tail_words: int = 50
    # spaCy pipeline splitting sentences; null or "": the rule-based sentencizer (also the
    # fallback, with a warning, when the pipeline is not installed)
    spacy_model: str | None = "en_core_web_lg"
    n_process: int = 1  # spaCy processes (nlp.pipe n_process); each shard is one pipe call


@dataclass
class TitleFilterSpec:
    """Which articles a corpus keeps, by passage title (SQuAD's decoded spelling: `Brasília`,
    spaces): those of `include` (null: every article) but not of `exclude`. Each is null, a
    list of titles, or a file of them: a JSON list, or text with one title a line. The titles'
    content (not the file's path) keys the units, so a filtered corpus never shares a cache
    entry with another; `dataset.titles` follows it where the dataset config says so."""

    include: Any = None
    exclude: Any = None


@dataclass
class CorpusSpec:
    """A retrieval corpus: its sources, segmentation, unit tables and shard sizes."""

    name: str
    # ready-made collections per granularity ({path, format, columns...}: corpus.collections)
    sources: dict[str, Any] = field(default_factory=dict)
    passages: str | None = None  # passages JSONL {"id", "title", "text"} (or BEIR corpus.jsonl)
    passages_format: str | None = None  # null: densex passages JSONL | beir
    propositions: str | None = None  # {"id": passage_id, "propositions": [...]} JSONL
    dir: str | None = None  # a BEIR dataset folder the paths are relative to
    documents: str | None = None  # a file, a saved dataset or a hub id
    documents_format: str = "squad"  # squad | jsonl | hf
    # document reader columns (jsonl, hf) and hub options (hf)
    title_column: str = "title"
    text_column: str = "text"
    id_column: str | None = None
    section_column: str | None = "section"
    paragraph_separator: str | None = None
    hf_name: str | None = None
    split: str = "train"
    revision: str | None = None
    limit: int | None = None
    segmentation: SegmentationSpec = field(default_factory=SegmentationSpec)
    titles: TitleFilterSpec = field(default_factory=TitleFilterSpec)  # articles kept
    on_error: str = "raise"  # raise | skip (skips are counted in the units manifest)
    granularities: list[str] = field(default_factory=lambda: list(GRANULARITIES))
    shard_rows: int = 20_000  # source rows per Arrow shard: the unit of resume, one spaCy batch
    shard_units: int = 200_000  # units per proposition/collection shard
    # Table 1 of the paper, for `index.py stage=plan` before anything is downloaded
    expected_units: dict[str, int] = field(default_factory=dict)
    expected_avg_words: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_choices(
            f"corpus {self.name!r}",
            on_error=(self.on_error, ON_ERROR),
            documents_format=(self.documents_format, DOCUMENT_FORMATS),
        )
        if self.passages_format == "beir" and not self.dir:
            raise ValueError(f"corpus {self.name!r}: set corpus.dir to the BEIR dataset folder")
        unknown = sorted(set(self.granularities) - set(GRANULARITIES))
        if unknown:
            raise ValueError(
                f"corpus {self.name!r}: granularities {unknown} not in {GRANULARITIES}"
            )
