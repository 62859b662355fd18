"""What the `granularity`, `fusion` and `task` config groups say, as typed dataclasses.

These groups configure the pipelines themselves (which units a cell searches, how member
cells are fused, which job `evaluate.py` runs), so their schemas live here; `schemas.py`
registers them with the lower layers' ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from densex.corpus.spec import GRANULARITIES
from densex.utils.config import check_choices

PROPOSITION_SUBSETS = ("all", "validation", "train")
GENERATE_MODES = ("auto", "subset", "corpus")


@dataclass
class GranularitySpec:
    """The retrieval unit of a cell; `members`: the union of several (`mixed`)."""

    name: str
    members: list[str] | None = None

    def __post_init__(self) -> None:
        wanted = self.members if self.members is not None else [self.name]
        unknown = sorted(set(wanted) - set(GRANULARITIES))
        if unknown:
            raise ValueError(f"granularity {self.name!r}: {unknown} not in {GRANULARITIES}")


@dataclass
class FusionSpec:
    """Reciprocal rank fusion of member cells: each `{granularity, retriever}` override of the
    cell (null = the cell's own) retrieves `depth` passages, fused with constant `k`."""

    name: str
    k: int = 60
    depth: int = 100  # passages each member ranks before fusion (>= max(topk))
    members: list[Any] = field(default_factory=list)
    sparse: Any = None  # fusion=hybrid: the BM25 retriever node its second member uses


@dataclass
class RetrievalTaskSpec:
    """`task=retrieval`: the benchmark cell (recall@k, EM@budget); its settings are top-level."""

    name: str


@dataclass
class PropositionsTaskSpec:
    """`task=propositions`: predicted propositions against references and two baselines,
    scored by BERTScore set-F1 (`metrics.set_f1.SetF1Scorer(**scorer)`) and content words."""

    name: str
    # predicted propositions, JSONL {"id", "propositions"}; null = generate them with the
    # configured propositionizer (model | teacher; cached as index.py caches them), or none
    # (only the baselines) with propositionizer=file
    predictions: str | None = None
    label: str | None = None  # the predicted system's name; null: model | predictions
    references: str | None = None  # JSONL {"id", "propositions"} (the teacher's)
    # which passages: all | validation | train (the training data's article split, a fixed
    # hash of the title: data.split_by_title)
    subset: str = "validation"
    # the split's fraction; null = the trained model's data.val_fraction (its export's
    # manifest.json) when known, else 0.1
    val_fraction: float | None = None
    limit_passages: int | None = None  # the first N selected passages (quick checks)
    # what generation covers: auto (the whole corpus when its propositions are already cached,
    # as retrieval with propositionizer=model leaves them, else the selected passages) |
    # subset | corpus
    generate: str = "auto"
    # rows besides the predictions: the references themselves (set-F1 1 by construction) and
    # the baselines
    include_reference: bool = True
    baselines: list[str] = field(default_factory=lambda: ["sentences", "passage"])
    stemmer: str | None = None  # null: exact tokens | english (Snowball, needs PyStemmer)
    scorer: dict[str, Any] = field(default_factory=dict)  # SetF1Scorer arguments

    def __post_init__(self) -> None:
        check_choices(
            "task",
            subset=(self.subset, PROPOSITION_SUBSETS),
            generate=(self.generate, GENERATE_MODES),
        )
