"""Open cached indexes by the entries' overrides and search them: `densex.open_index`.

Contract: `open_index(*overrides)` composes `conf/serve.yaml` with the overrides (one config
per granularity of a `granularity=a,b,c` override: `search.compose`), runs the entries'
preflight, and opens each granularity's cell with `pipelines.evaluate.cell.open_cell`, which
builds the units, embeddings and index when they are missing and reuses them otherwise. It
returns an `IndexSet` (granularity -> `GranularityIndex`). `GranularityIndex.search(queries,
k)` returns, per query, the top-k passages by max over their units (the search `evaluate.py`
runs: same passages, same scores) as `Hit`s, each with the passage's best-scoring fetched
units (`Unit`: id, text, score, character span in the passage: `spans.unit_span`). A `k`
above the corpus's passage count is a ValueError saying so (a search returns unique
passages, so it could only return fewer). Opening maps the units and passages tables (12
bytes per unit are read: `passage_row`, `words`); text is read only for the passages and
units a search returns. Without a `granularity=` override, an experiment that sweeps
granularities (`experiment=demo`) opens them all (`compose.compose_configs`).

The benchmark questions are the configured `dataset`, which by default follows the corpus
(`conf/serve.yaml`: `dataset=<corpus name>` where such a dataset exists, none otherwise): a
query that is one of them gets its answers from `IndexSet.answers` (the dataset is read on
first use), `IndexSet.examples(n)` gives some to try, and `IndexSet.question_problem()` says
in one line why answers cannot be highlighted (no dataset; or a dataset that is not the
corpus's own and none of whose `PROBE_QUESTIONS` questions finds an answer in its top
`PROBE_K` passages), else None.
Granularities opened with the same retriever share one query encoder
(`retrieval.build.share_query_encoders`); no units file is read to find its embeddings
(`corpus.units_digest`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
from omegaconf import DictConfig

from densex.metrics.answers import has_answer
from densex.pipelines.edge import cache_spec
from densex.pipelines.evaluate.cell import Cell, granularity_name, load_questions, open_cell
from densex.pipelines.evaluate.fusion import fused_retrieval, is_rrf
from densex.pipelines.preflight.run import preflight
from densex.pipelines.search.compose import compose_configs
from densex.pipelines.search.hits import Hit, hits_of
from densex.retrieval.build import share_query_encoders
from densex.retrieval.search import retrieve_passages
from densex.utils.integrity import configure as configure_cache
from densex.utils.io import DataError
from densex.utils.logging import get_logger

log = get_logger(__name__)
# `question_problem`: how many of the dataset's first questions are tried, at what depth
PROBE_QUESTIONS, PROBE_K = 20, 20


class GranularityIndex:
    """One granularity's opened cell (units, passages, searcher) and its search."""

    def __init__(self, cfg: DictConfig, cell: Cell) -> None:
        self.cfg, self.cell = cfg, cell
        self.granularity = granularity_name(cfg)  # `sentence-late` apart from `sentence`
        self.retriever = str(cfg.retriever.name)
        self._ratio = int(np.ceil(len(cell.units) / max(1, len(cell.passages))))

    def __len__(self) -> int:
        return len(self.cell.units)

    @property
    def n_passages(self) -> int:
        """The corpus's passages: the most a search can return."""
        return len(self.cell.passages)

    def check_k(self, k: int) -> None:
        """ValueError unless 1 <= `k` <= the corpus's passages (the message names both)."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if k > self.n_passages:
            raise ValueError(f"k={k} is more than the {self.n_passages} passages of "
                             f"corpus={self.cfg.corpus.name}; ask for k <= {self.n_passages}")  # fmt: skip

    def search(
        self, queries: Sequence[str], k: int = 5, units_per_passage: int = 3
    ) -> list[list[Hit]]:
        """Per query, the top-`k` passages with up to `units_per_passage` of their units
        (ValueError for a `k` outside 1..the corpus's passages)."""
        self.check_k(k)
        queries = [str(q) for q in queries]
        if not queries:
            return []
        cell = self.cell
        rows = cell.unit_passage_rows
        if is_rrf(self.cfg):
            results = fused_retrieval(self.cfg, cell.searcher, queries, rows, cell.unit_words, k, 0)
        else:
            results = retrieve_passages(
                cell.searcher, queries, rows, k, n_start=k * self._ratio + 1
            )
        return hits_of(cell, results, units_per_passage)


class IndexSet(Mapping[str, GranularityIndex]):
    """The granularities opened by one `open_index` call, in the order given."""

    def __init__(self, indexes: Sequence[GranularityIndex]) -> None:
        self._indexes = {i.granularity: i for i in indexes}
        if len(self._indexes) != len(indexes):
            raise ValueError("each granularity may be opened once")
        self.cfg = indexes[0].cfg
        self._questions: dict[str, dict] | None = None
        self._by_text: dict[str, dict] = {}

    def __getitem__(self, granularity: str) -> GranularityIndex:
        if granularity not in self._indexes:
            raise KeyError(f"unknown granularity {granularity!r} (open: {', '.join(self)})")
        return self._indexes[granularity]

    def __iter__(self) -> Iterator[str]:
        return iter(self._indexes)

    def __len__(self) -> int:
        return len(self._indexes)

    @property
    def corpus(self) -> str:
        """The corpus's config name (`corpus=`)."""
        return str(self.cfg.corpus.name)

    @property
    def dataset(self) -> str | None:
        """The benchmark questions' config name (`dataset=`), None when none is configured."""
        node = self.cfg.get("dataset")
        return str(node.name) if node is not None else None

    @property
    def n_passages(self) -> int:
        """The corpus's passages (every granularity holds the same): the largest `k`."""
        return next(iter(self.values())).n_passages

    def granularity(self, granularity: str | None = None) -> str:
        """`granularity`, or the one opened when it is None (several opened: a ValueError
        naming them, since any choice would be a silent one)."""
        if granularity is not None:
            return self[granularity].granularity
        if len(self) > 1:
            raise ValueError(f"{len(self)} granularities are open ({', '.join(self)}): name one, "
                             f"e.g. granularity={next(iter(self))!r}")  # fmt: skip
        return next(iter(self))

    def search(
        self, queries: Sequence[str], k: int = 5, granularity: str | None = None,
        units_per_passage: int = 3,
    ) -> list[list[Hit]]:  # fmt: skip
        """`GranularityIndex.search` of `granularity` (None: the only one opened)."""
        return self[self.granularity(granularity)].search(queries, k, units_per_passage)

    def compare(
        self, queries: Sequence[str], k: int = 5, granularities: Sequence[str] | None = None,
        units_per_passage: int = 3,
    ) -> dict[str, list[list[Hit]]]:  # fmt: skip
        """The same queries at each of `granularities` (None: every opened one), side by side."""
        names = list(granularities) if granularities is not None else list(self)
        return {g: self[g].search(queries, k, units_per_passage) for g in names}

    @property
    def questions(self) -> dict[str, dict]:
        """The dataset's questions by id (`{}` without a dataset, or when it cannot be read:
        logged)."""
        if self._questions is None:
            self._questions = {}
            rows: list[dict] = []
            if self.dataset is not None:
                try:
                    rows, _ = load_questions(self.cfg)
                except (DataError, OSError, ValueError) as e:
                    log.warning("no benchmark questions to highlight answers with: %s", e)
            for q in rows:
                self._questions[str(q.get("id"))] = q
                self._by_text.setdefault(_normal(q["question"]), q)
        return self._questions

    def answers(self, query: str) -> list[str] | None:
        """The answers of the dataset question whose text is `query` (case, spaces aside)."""
        _ = self.questions
        q = self._by_text.get(_normal(query))
        return [str(a) for a in q.get("answers") or []] if q else None

    def first_answer_rank(self, hits: Sequence[Hit], answers: Sequence[str]) -> int | None:
        """The rank (1-based) of the first of `hits` whose passage holds one of `answers`, by
        the dataset's match rule (DPR's has_answer, as `evaluate.py` counts recall); None when
        none does."""
        if not answers:
            return None
        match = str(self.cfg.dataset.get("match", "string")) if self.dataset else "string"
        for rank, h in enumerate(hits, start=1):
            if has_answer(answers, h.text, match):
                return rank
        return None

    def examples(self, n: int = 5) -> list[dict]:
        """`n` of the dataset's questions that have answers, spread evenly over it."""
        rows = [q for q in self.questions.values() if q.get("answers")]
        return [rows[i * len(rows) // n] for i in range(min(n, len(rows)))]

    def question_problem(self) -> str | None:
        """One line saying why no benchmark question can get its answers highlighted, or None
        (see the module doc; the probe is one search of `PROBE_QUESTIONS` questions)."""
        fix = f"dataset=NAME names the benchmark whose questions corpus={self.corpus} answers"
        if self.dataset is None:
            return (f"no benchmark questions: no dataset is named {self.corpus!r} like the corpus, "
                    f"so no answer is highlighted; {fix}")  # fmt: skip
        if self.dataset == self.corpus or not self.questions:
            return None  # the corpus's own questions (or a read error, logged)
        probe = self.examples(PROBE_QUESTIONS)
        if not probe:
            return None  # answerless queries (e.g. BEIR): nothing to highlight anyway
        k = min(PROBE_K, self.n_passages)
        g = next(iter(self))
        found = self.compare([q["question"] for q in probe], k, [g], 1)[g]
        if any(self.first_answer_rank(hits, q["answers"]) for q, hits in zip(probe, found)):
            return None
        return (
            f"dataset={self.dataset} does not match corpus={self.corpus}: none of "
            f"{len(probe)} of its questions finds an answer in its top {k} passages, so "
            f"answers will rarely be highlighted; {fix}"
        )


def _normal(text: str) -> str:
    return " ".join(str(text).split()).casefold()


def open_configs(cfgs: Sequence[DictConfig], checked: bool = False) -> IndexSet:
    """Preflight each composed config (unless the caller did: `checked`), then open (building
    what is missing) each cell."""
    if not cfgs:
        raise ValueError("no config to open")
    configure_cache(cache_spec(cfgs[0].get("cache")))
    indexes = []
    for cfg in cfgs:
        if not checked:
            preflight(cfg, "index")
        times: dict[str, float] = {}
        cell = open_cell(cfg, times)
        log.info("opened %s/%s: %d units, %d passages (%.1f s)", cfg.retriever.name,
                 cfg.granularity.name, len(cell.units), len(cell.passages), sum(times.values()))  # fmt: skip
        indexes.append(GranularityIndex(cfg, cell))
    share_query_encoders(i.cell.searcher for i in indexes)  # one model per retriever
    return IndexSet(indexes)


def open_index(*overrides: str) -> IndexSet:
    """Open (building what is missing) the indexes named by Hydra overrides, e.g.
    `open_index("corpus=squad-open", "granularity=passage,proposition", "retriever=minilm",
    "paths.cache_dir=DIR")`. Raises `PreflightError` / `DataError` on bad input."""
    return open_configs(compose_configs(overrides))
