"""Open cached indexes by the entries' overrides and search them: `densex.open_index`.

Contract: `open_index(*overrides)` composes `conf/serve.yaml` with the overrides (one config
per granularity of a `granularity=a,b,c` override: `search.compose`), runs the entries'
preflight, and opens each granularity's cell with `pipelines.evaluate.cell.open_cell`, which
builds the units, embeddings and index when they are missing and reuses them otherwise. It
returns an `IndexSet` (granularity -> `GranularityIndex`). `GranularityIndex.search(queries,
k)` returns, per query, the top-k passages by max over their units (the search `evaluate.py`
runs: same passages, same scores) as `Hit`s, each with the passage's best-scoring fetched
units (`Unit`: id, text, score, character span in the passage). Opening maps the units and
passages tables (12 bytes per unit are read: `passage_row`, `words`); text is read only for
the passages and units a search returns. A query that is one of the dataset's questions gets
its answers from `IndexSet.answers` (the dataset is read on first use). Granularities opened
with the same retriever share one query encoder (`retrieval.build.share_query_encoders`); no
units file is read to find its embeddings (`corpus.units_digest`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from omegaconf import DictConfig

from densex.pipelines.edge import cache_spec
from densex.pipelines.evaluate.cell import Cell, load_questions, open_cell
from densex.pipelines.evaluate.fusion import fused_retrieval, is_rrf
from densex.pipelines.preflight.run import preflight
from densex.pipelines.search.compose import compose_configs
from densex.pipelines.search.spans import unit_span
from densex.retrieval.build import share_query_encoders
from densex.retrieval.search import retrieve_passages
from densex.utils.integrity import configure as configure_cache
from densex.utils.io import DataError
from densex.utils.logging import get_logger

log = get_logger(__name__)


@dataclass
class Unit:
    """A retrieved unit of a passage: its score and `span`, the characters `[start, end)` of
    the passage text it matches (None when no word matches)."""

    id: str
    text: str
    score: float
    span: tuple[int, int] | None


@dataclass
class Hit:
    """A ranked passage: its score is the max over its units (`units`, best first)."""

    id: str
    title: str
    text: str
    score: float
    units: list[Unit] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the service returns (`span` as `[start, end]` or null)."""
        d = asdict(self)
        for u in d["units"]:
            u["span"] = list(u["span"]) if u["span"] is not None else None
        return d


class GranularityIndex:
    """One granularity's opened cell (units, passages, searcher) and its search."""

    def __init__(self, cfg: DictConfig, cell: Cell) -> None:
        self.cfg, self.cell = cfg, cell
        self.granularity = str(cfg.granularity.name)
        self.retriever = str(cfg.retriever.name)
        self._ratio = int(np.ceil(len(cell.units) / max(1, len(cell.passages))))

    def __len__(self) -> int:
        return len(self.cell.units)

    def search(
        self, queries: Sequence[str], k: int = 5, units_per_passage: int = 3
    ) -> list[list[Hit]]:
        """Per query, the top-`k` passages with up to `units_per_passage` of their units."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
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
        return self._hits(results, units_per_passage)

    def _hits(self, results: Sequence[Any], per_passage: int) -> list[list[Hit]]:
        """`Hit`s from `retrieve_passages` results, reading text for the returned rows only."""
        cell = self.cell
        chosen: list[list[tuple[int, np.ndarray]]] = []
        for r in results:
            of_unit = cell.unit_passage_rows[r.unit_rows]
            chosen.append([(int(p), np.flatnonzero(of_unit == p)[:per_passage])
                           for p in r.passage_rows.tolist()])  # fmt: skip
        p_rows = np.unique([p for c in chosen for p, _ in c]).astype(np.int64)
        u_rows = np.unique(np.concatenate(
            [r.unit_rows[sel] for r, c in zip(results, chosen) for _, sel in c] or [[]]
        )).astype(np.int64)  # fmt: skip
        passages = {c: dict(zip(p_rows.tolist(), cell.passages.take(c, p_rows)))
                    for c in ("id", "title", "text")}  # fmt: skip
        units = {c: dict(zip(u_rows.tolist(), cell.units.take(c, u_rows))) for c in ("id", "text")}
        out = []
        for r, c in zip(results, chosen):
            hits = []
            for (p, sel), score in zip(c, r.passage_scores.tolist()):
                text = passages["text"][p] or ""
                hit_units = [
                    Unit(units["id"][u], units["text"][u], float(s), unit_span(units["text"][u], text))
                    for u, s in zip(r.unit_rows[sel].tolist(), r.unit_scores[sel].tolist())
                ]  # fmt: skip
                hits.append(Hit(passages["id"][p], passages["title"][p] or "", text, float(score),
                                hit_units))  # fmt: skip
            out.append(hits)
        return out


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

    def search(
        self, queries: Sequence[str], k: int = 5, granularity: str | None = None,
        units_per_passage: int = 3,
    ) -> list[list[Hit]]:  # fmt: skip
        """`GranularityIndex.search` of `granularity` (None: the first opened)."""
        index = self[granularity] if granularity is not None else next(iter(self.values()))
        return index.search(queries, k, units_per_passage)

    def compare(self, queries: Sequence[str], k: int = 5) -> dict[str, list[list[Hit]]]:
        """The same queries at every opened granularity, side by side."""
        return {g: index.search(queries, k) for g, index in self.items()}

    @property
    def questions(self) -> dict[str, dict]:
        """The dataset's questions by id (`{}` when the dataset cannot be read: logged)."""
        if self._questions is None:
            self._questions = {}
            try:
                rows, _ = load_questions(self.cfg)
            except (DataError, OSError, ValueError) as e:
                log.warning("no benchmark questions to highlight answers with: %s", e)
                rows = []
            for q in rows:
                self._questions[str(q.get("id"))] = q
                self._by_text.setdefault(_normal(q["question"]), q)
        return self._questions

    def answers(self, query: str) -> list[str] | None:
        """The answers of the dataset question whose text is `query` (case, spaces aside)."""
        _ = self.questions
        q = self._by_text.get(_normal(query))
        return [str(a) for a in q.get("answers") or []] if q else None


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
