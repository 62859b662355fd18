"""Which passages `task.subset` (all | validation | test | train) names: the trained model's
article split, as its training made it.

Contract: `resolve_subset_rule` returns the rule (`SubsetRule`): the fractions of
`pairs.split_articles` over the corpus's own titles (`task.val_fraction` /
`task.test_fraction`, else the model's `data.val_fraction` / `data.test_fraction` from its
export manifest, else 0.1 and 0), or, for a model trained on `data.sources` (no
`task.val_fraction`), the training's own per-source split (`sources.read_sources`, and
`sources.first_articles` for `data.train_articles`) of the source files its manifest names.
`select_passages` applies it. When those source files are not on this machine, or the corpus
holds none of the subset's articles, a `ValueError` points to the corpora
`scripts/heldout_split.py --out HELD` writes (`HELD/validation`, ...) and `task.subset=all`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from densex.pipelines.specs import PROPOSITION_SUBSETS
from densex.pipelines.train.sources import pair_sources
from densex.propositionizer.quality import split_passage_ids
from densex.propositionizer.sources import PairSource, first_articles, read_sources
from densex.utils.config import check_choices
from densex.utils.io import read_json
from densex.utils.logging import get_logger

__all__ = [
    "DEFAULT_VAL_FRACTION",
    "SubsetRule",
    "resolve_subset_rule",
    "resolve_val_fraction",
    "select_passages",
    "trained_data",
]

log = get_logger("densex.pipelines.propositions.run")  # the stage's log lines keep its name

DEFAULT_VAL_FRACTION = 0.1  # conf/data/squad-open.yaml


def trained_data(propositionizer: Any) -> tuple[dict[str, Any], Path | None]:
    """(the `data` config the model at `propositionizer.model` was trained with, its export
    manifest `manifest.json`); ({}, None) without a manifest."""
    model = (propositionizer or {}).get("model")
    manifest = Path(str(model)) / "manifest.json" if model not in (None, "???") else None
    if manifest is None or not manifest.is_file():
        return {}, None
    return ((read_json(manifest) or {}).get("config") or {}).get("data") or {}, manifest


def resolve_val_fraction(task: Any, propositionizer: Any) -> tuple[tuple[float, float], str]:
    """((validation fraction, test fraction), where they came from): `task.val_fraction` /
    `task.test_fraction`, else the trained model's `data.val_fraction` / `data.test_fraction`
    from its export manifest (`hf_model/manifest.json`), else 0.1 and 0 (a model trained
    before the three-way split). A model trained on `data.sources` has no such fractions
    without `task.val_fraction`: a ValueError (`resolve_subset_rule` reads its split)."""
    data, manifest = trained_data(propositionizer)
    source = "default"
    if data.get("val_path") or data.get("val_split"):
        log.warning(
            "the model was validated on a separate file/split (%s), not by article: "
            "task.subset=%s selects articles by the title hash all the same",
            data.get("val_path") or data.get("val_split"),
            task.get("subset"),
        )
    if data.get("val_fraction") is not None:
        source = str(manifest)
    elif data.get("format") == "sources" and task.get("val_fraction") is None:
        raise ValueError(f"{manifest}: trained on data.sources, split per source (no fraction)")
    val = task.get("val_fraction")
    val = data.get("val_fraction", DEFAULT_VAL_FRACTION) if val is None else val
    test = task.get("test_fraction")
    test = data.get("test_fraction", 0.0) if test is None else test
    if task.get("val_fraction") is not None:
        source = "task.val_fraction"
    return (float(val), float(test or 0.0)), source


def heldout_hint(subset: str) -> str:
    """How to report on the subset's articles without the training's source files."""
    flag = " --with-train" if subset == "train" else ""
    return (
        f"write the split as corpora (python scripts/heldout_split.py --out HELD{flag}) and"
        f" report on one: corpus.passages=HELD/{subset}/passages.jsonl"
        f" corpus.propositions=HELD/{subset}/propositions.jsonl task.subset=all"
    )


@dataclass(frozen=True)
class SubsetRule:
    """How `task.subset` picks its articles: `fractions` (validation, test) of
    `pairs.split_articles` over the corpus's own titles, or, with `sources` (a model trained
    on `data.sources`; `train_articles`: its `data.train_articles`), the training's split of
    those sources' articles, read when a subset other than `all` asks. `origin`: where the
    rule came from (`task.val_fraction`, a manifest, `default`)."""

    origin: str
    fractions: tuple[float, float] = (DEFAULT_VAL_FRACTION, 0.0)
    sources: tuple[PairSource, ...] = ()
    train_articles: int | None = None

    @property
    def described(self) -> Any:
        """The report's `val_fraction`: the validation fraction, or each source's (validation,
        test) fractions by name."""
        if not self.sources:
            return self.fractions[0]
        return {s.name: [s.val_fraction, s.test_fraction] for s in self.sources}

    def titles(self, subset: str) -> set[str]:
        """The article titles the training put in `subset` (train | validation | test), from
        `sources`; a source file missing here is a ValueError with `heldout_hint`."""
        files = [f for s in self.sources for f in (s.passages, s.propositions)]
        if missing := [f for f in files if not Path(f).is_file()]:
            raise ValueError(
                f"task.subset={subset}: the model was trained on data.sources ({self.origin}),"
                f" split per source, and its file {missing[0]} is not here: {heldout_hint(subset)}"
            )
        pairs = getattr(read_sources(self.sources), subset)
        if subset == "train" and self.train_articles:
            pairs = first_articles(pairs, self.train_articles)
        return {p["title"] for p in pairs}

    def passage_ids(self, passages: Sequence[dict[str, Any]], subset: str) -> list[str]:
        """Ids of the `passages` (in order) whose article is in `subset`."""
        if not self.sources:
            val_fraction, test_fraction = self.fractions
            return split_passage_ids(passages, val_fraction, subset, test_fraction)
        titles = self.titles(subset)
        return [p["id"] for p in passages if p.get("title") in titles]


def resolve_subset_rule(task: Any, propositionizer: Any) -> SubsetRule:
    """The rule of `task.subset` (module docstring): the model's `data.sources` split when it
    was trained on sources and `task.val_fraction` is unset, else `resolve_val_fraction`'s."""
    data, manifest = trained_data(propositionizer)
    if data.get("format") == "sources" and task.get("val_fraction") is None:
        sources = tuple(pair_sources(data.get("sources")) or ())
        if not sources:
            raise ValueError(f"{manifest}: data.format=sources without data.sources")
        n = data.get("train_articles")
        return SubsetRule(f"{manifest} data.sources", sources=sources,
                          train_articles=int(n) if n else None)  # fmt: skip
    return SubsetRule(*reversed(resolve_val_fraction(task, propositionizer)))


def select_passages(
    passages: Sequence[dict[str, Any]], subset: str, rule: SubsetRule, limit: int | None
) -> list[dict[str, Any]]:
    """The passages of `subset` (all | validation | test | train, by article: `rule`), first
    `limit` kept. No passage of a sources split in the corpus is a ValueError with
    `heldout_hint`."""
    check_choices("task", subset=(subset, PROPOSITION_SUBSETS))
    if subset == "all":
        chosen = list(passages)
    else:
        keep = set(rule.passage_ids(passages, subset))
        chosen = [p for p in passages if p["id"] in keep]
        if not chosen and rule.sources:
            raise ValueError(
                f"task.subset={subset}: none of the corpus's {len(passages)} passages is of"
                f" the model's {subset} articles ({rule.origin}): {heldout_hint(subset)}"
            )
    return chosen[:limit] if limit else chosen
