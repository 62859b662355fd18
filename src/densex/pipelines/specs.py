"""What the `granularity`, `fusion` and `task` config groups say, as typed dataclasses.

These groups configure the pipelines themselves (which units a cell searches, how member
cells are fused, which job `evaluate.py` runs, what `serve.py` serves), so their schemas live here; `schemas.py`
registers them with the lower layers' ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from densex.corpus.spec import GRANULARITIES
from densex.utils.config import check_choices

PROPOSITION_SUBSETS = ("all", "validation", "test", "train")
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
    # which passages: all | validation | test | train (the training data's article split, a
    # fixed hash of the title: pairs.split_articles)
    subset: str = "validation"
    # the split's fraction; null = the trained model's data.val_fraction (its export's
    # manifest.json) when known, else 0.1; a model trained on data.sources: each source's
    # split, as training made it (pipelines.propositions.subset)
    val_fraction: float | None = None
    # the test articles' fraction; null = the trained model's data.test_fraction when known,
    # else 0 (a model trained before the three-way split)
    test_fraction: float | None = None
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


SERVE_LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


@dataclass
class ServeSpec:
    """Where the service listens, what it accepts, how it batches.

    `host` defaults to loopback: exposing the service is an explicit choice. A request with
    `k` outside 1..`max_k`, a query longer than `max_query_chars`, more than
    `max_request_queries` queries or a body over `max_body_bytes` is refused with a 4xx.
    Concurrent queries wait at most `batch_wait_ms` to share an encoder call of at most
    `batch_max_queries` queries. `sweep_dir`: a finished evaluate sweep for the sweep browser.
    `granularities`: set by `serve.py` from `granularity=a,b,c` (null: the one granularity).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    default_k: int = 5
    max_k: int = 100
    max_query_chars: int = 2000
    max_request_queries: int = 256
    max_body_bytes: int = 1_000_000
    batch_max_queries: int = 64
    batch_wait_ms: float = 2.0
    units_per_passage: int = 3
    sweep_dir: str | None = None
    granularities: list[str] | None = None
    log_level: str = "warning"

    def __post_init__(self) -> None:
        check_choices("serve", log_level=(self.log_level, SERVE_LOG_LEVELS))
        for key in ("port", "default_k", "max_k", "max_query_chars", "max_request_queries",
                    "max_body_bytes", "batch_max_queries", "units_per_passage"):  # fmt: skip
            if int(getattr(self, key)) < (0 if key == "port" else 1):
                raise ValueError(f"serve.{key} must be >= 1, got {getattr(self, key)}")
        if not 1 <= self.default_k <= self.max_k:
            raise ValueError(f"serve.default_k must be in 1..serve.max_k, got {self.default_k}")
        if self.batch_wait_ms < 0:
            raise ValueError(f"serve.batch_wait_ms must be >= 0, got {self.batch_wait_ms}")
