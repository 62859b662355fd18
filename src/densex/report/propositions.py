"""Propositionizer quality report: any passages + reference propositions + predicted ones.

For every *system* (a propositions set per passage: a model's, or a baseline computed by the
same code: the passage's sentences, the passage as one proposition; and the references
themselves as a ceiling/sanity row), per passage and in aggregate:

- set-F1 / precision / recall against the references (BERTScore, `metrics.set_f1`);
- propositions per passage and whitespace words per proposition, beside the references';
- coverage and unsupported words (`metrics.propositions`: content words = lowercased tokens
  minus spaCy's English stop words);
- for generated propositions: the JSON parse rate (outputs used as parsed, strict or
  repaired), fallbacks and outputs cut at `max_new_tokens` (`propositionizer.quality`).

Aggregates are means over passages (set-F1 the mean of per-passage set-F1, as in training's
validation), except words per proposition: total words / total propositions (Table 1's way).
Written out by `report.propositions_files`: `propositions_per_passage.csv`,
`propositions_report.csv` / `.md` / `.json`, and a W&B table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from densex.metrics.propositions import PropositionWordStats, stopwords, word_stats
from densex.utils.records import Record

__all__ = [
    "PASSAGE",
    "REFERENCE",
    "SENTENCES",
    "aggregate",
    "baseline_systems",
    "quality_rows",
]

REFERENCE = "reference"
SENTENCES = "sentences"
PASSAGE = "passage"


def baseline_systems(
    passages: Sequence[Record], sentences: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, list[str]]]:
    """The two baselines: `sentences` (the passage's sentence units) and `passage` (the passage
    text as one proposition). A passage without sentences is its own single sentence."""
    by_sentence = {p["id"]: list(sentences.get(p["id"]) or [p["text"]]) for p in passages}
    return {SENTENCES: by_sentence, PASSAGE: {p["id"]: [p["text"]] for p in passages}}


def _score(
    scorer: Any, systems: Mapping[str, Mapping[str, Sequence[str]]], ids: list[str], refs: list
) -> dict[str, list[dict[str, float]]]:
    """Per-passage (precision, recall, f1) of every system. Without idf, one scorer call over
    all systems, so each distinct sentence (the references above all) is embedded once; with
    idf, one call per system, so the idf weights come from the reference sets exactly once."""
    names = list(systems)
    if getattr(scorer, "idf", False):
        return {n: scorer.score([systems[n][i] for i in ids], refs).per_passage for n in names}
    preds = [systems[n][i] for n in names for i in ids]
    per = scorer.score(preds, refs * len(names)).per_passage
    return {n: per[k * len(ids) : (k + 1) * len(ids)] for k, n in enumerate(names)}


def quality_rows(
    passages: Sequence[Record],
    references: Mapping[str, Sequence[str]],
    systems: Mapping[str, Mapping[str, Sequence[str]]],
    scorer: Any,
    parse: Mapping[str, Mapping[str, Record] | None] | None = None,
    stem: Callable[[list[str]], list[str]] | None = None,
) -> list[dict[str, Any]]:
    """One row per (system, passage), systems in the given order, passages in order.

    `passages`: `{"id", "title", "section", "text"}`; `references` and each system map every
    passage id to its propositions; `scorer` is a `SetF1Scorer` (anything with its `score`);
    `parse[system]` maps passage ids to `propositionizer.quality.parse_outcomes` rows;
    `stem` (`metrics.propositions.stemmer`) compares content words as stems.
    """
    ids = [p["id"] for p in passages]
    for name, props in systems.items():
        missing = [i for i in ids if i not in props]
        if missing:
            raise KeyError(f"system {name!r} has no propositions for {len(missing)} passages, "
                           f"e.g. {missing[0]!r}")  # fmt: skip
    refs = [list(references[i]) for i in ids]
    scores = _score(scorer, systems, ids, refs)
    stop = stopwords()
    ref_stats = {
        p["id"]: word_stats(p["text"], references[p["id"]], _context(p), stop, stem)
        for p in passages
    }
    rows = []
    for name, props in systems.items():
        outcomes = (parse or {}).get(name) or {}
        for p, s in zip(passages, scores[name]):
            st = word_stats(p["text"], props[p["id"]], _context(p), stop, stem)
            rows.append(_row(name, p, s, st, ref_stats[p["id"]], outcomes.get(p["id"]) or {}))
    return rows


def _row(
    name: str,
    p: Record,
    s: Mapping[str, float],
    st: PropositionWordStats,
    ref: PropositionWordStats,
    outcome: Record,
) -> dict[str, Any]:
    """The row of system `name` on passage `p`: its scores `s`, word stats `st` beside the
    references' `ref`, and its parse outcome."""
    return {
        "system": name,
        "passage_id": p["id"],
        "title": p.get("title") or "",
        "set_f1": s["f1"],
        "precision": s["precision"],
        "recall": s["recall"],
        "n_propositions": st.n_propositions,
        "ref_n_propositions": ref.n_propositions,
        "words_per_proposition": st.words_per_proposition,
        "ref_words_per_proposition": ref.words_per_proposition,
        "coverage": st.coverage,
        "unsupported": st.unsupported,
        "passage_content_words": st.passage_content_words,
        "proposition_content_words": st.proposition_content_words,
        "parse": outcome.get("parse"),
        "fallback_reason": outcome.get("fallback_reason"),
        "repairs": outcome.get("repairs"),
        "cut": outcome.get("cut"),
        "unsupported_words": " ".join(st.unsupported_words),
        # totals for the aggregate (not written per passage)
        "_words": st.n_words,
        "_ref_words": ref.n_words,
    }


def _context(p: Record) -> list[str]:
    return [str(p.get("title") or ""), str(p.get("section") or "")]


def _mean(values: list[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None and not _isnan(v)]
    return sum(vals) / len(vals) if vals else None


def _isnan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def aggregate(rows: Sequence[Record]) -> list[dict[str, Any]]:
    """One row per system (first-seen order) with the columns of
    `report.propositions_files.TABLE_COLUMNS`. Parse columns are None for a system without
    per-passage parse results (baselines)."""
    table = []
    for name in dict.fromkeys(r["system"] for r in rows):
        rs = [r for r in rows if r["system"] == name]
        n = len(rs)
        n_props = sum(r["n_propositions"] for r in rs)
        n_ref = sum(r["ref_n_propositions"] for r in rs)
        words = _ratio(sum(r["_words"] for r in rs), n_props)
        ref_words = _ratio(sum(r["_ref_words"] for r in rs), n_ref)
        parsed = [r for r in rs if r.get("parse")]
        known = len(parsed) == n and n > 0
        table.append(
            {
                "system": name,
                "n_passages": n,
                "set_f1": _mean([r["set_f1"] for r in rs]),
                "precision": _mean([r["precision"] for r in rs]),
                "recall": _mean([r["recall"] for r in rs]),
                "props_per_passage": n_props / n if n else None,
                "ref_props_per_passage": n_ref / n if n else None,
                "props_ratio": _ratio(n_props, n_ref),
                "words_per_prop": words,
                "ref_words_per_prop": ref_words,
                "words_ratio": _ratio(words, ref_words),
                "coverage": _mean([r["coverage"] for r in rs]),
                "unsupported": _mean([r["unsupported"] for r in rs]),
                "parse_rate": (sum(r["parse"] != "fallback" for r in rs) / n if known else None),
                "parsed_strict": sum(r["parse"] == "strict" for r in rs) if known else None,
                "repaired": sum(r["parse"] == "repaired" for r in rs) if known else None,
                "fallbacks": sum(r["parse"] == "fallback" for r in rs) if known else None,
                "hit_max_new_tokens": sum(bool(r["cut"]) for r in rs) if known else None,
            }
        )
    return table
