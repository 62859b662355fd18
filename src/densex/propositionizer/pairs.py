"""Passage -> propositions pairs for fine-tuning a propositionizer: the readers and the split.

A pair is ``{"id", "title", "source", "target"}``: the source is the paper's input string
``Title: {title}. Section: {section}. Content: {text}`` (per-sentence inputs may carry the
passage's earlier sentences as read-only context: ``... Section: {section}. Context:
{earlier sentences} Content: {sentence}``) and the target the JSON list of
propositions (``json.dumps(..., ensure_ascii=False)``), exactly what the model must generate.
Three readers produce pairs: the shared squad-open files (passages + propositions joined on
id; `partial` where the propositions cover some articles only, as squad-train's), the
released Hugging Face training data (``sources``/``targets`` columns), and JSONL; bad rows
are `DataError`s naming file, line and field, and pair ids are unique.
The train/validation/test split is by article, from a fixed hash of the title (`split_articles`),
so no article leaks across it and the split does not change with file order, seeds or Python's
hash salt.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from densex.utils.io import DataError, numbered_jsonl

__all__ = [
    "format_source",
    "format_target",
    "load_hf_pairs",
    "load_jsonl_pairs",
    "load_squad_open_pairs",
    "split_articles",
    "split_by_title",
    "split_source",
    "split_titles",
    "title_bucket",
    "title_of_source",
]

_TITLE_RE = re.compile(r"^Title:\s*(.*?)\.\s*Section:", re.DOTALL)
_SOURCE_RE = re.compile(
    r"^Title:\s?(.*?)\. Section:\s?(.*?)\.(?: Context:\s?(.*?))? Content:\s?(.*)$", re.DOTALL
)
CONTENT_MARKER = "Content:"  # what precedes the text the propositions are written for


def format_source(title: str, section: str, text: str, context: str | None = None) -> str:
    """The propositionizer's input string (paper, Figure 8 and the released model card); with
    a non-empty `context` (a passage's earlier sentences, for a per-sentence input) that text
    sits, marked, between the section and the content: read, not propositionized."""
    if context:
        return f"Title: {title}. Section: {section}. Context: {context} {CONTENT_MARKER} {text}"
    return f"Title: {title}. Section: {section}. {CONTENT_MARKER} {text}"


def format_target(propositions: Sequence[str]) -> str:
    """The generation target: a JSON list of propositions, non-ASCII kept as is."""
    return json.dumps(list(propositions), ensure_ascii=False)


def split_source(source: str) -> tuple[str, str, str] | None:
    """(title, section, text) of a `format_source` string (its context, if any, dropped);
    None for any other string."""
    m = _SOURCE_RE.match(source)
    return None if m is None else (m.group(1), m.group(2), m.group(4))


def title_of_source(source: str) -> str:
    """The article title inside a source string (the split key for sources without metadata)."""
    m = _TITLE_RE.match(source)
    return m.group(1).strip() if m else source[:100]


def _check_propositions(value: Any, path: str | os.PathLike, line: int | None, name: str) -> list:
    """A target given as a list of strings or a JSON string of one; anything else is located."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise DataError(path, line, name, f"not a JSON list of propositions ({e.msg})") from e
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise DataError(path, line, name, "expected a list of proposition strings")
    if not value:
        raise DataError(path, line, name, "empty list of propositions")
    return value


def _check_unique(
    pid: str, seen: set[str], path: Any, line: int | None, generated: bool = False
) -> None:
    """Pair ids must be unique: validation de-duplicates predictions by id (DDP padding)."""
    if pid in seen:
        how = " (the line number, used as id for a row without one)" if generated else ""
        raise DataError(path, line, "id", f"duplicate id {pid!r}{how}")
    seen.add(pid)


def _pair(pid: str, title: str, source: str, propositions: list[str]) -> dict[str, Any]:
    return {"id": pid, "title": title, "source": source, "target": format_target(propositions)}


def load_squad_open_pairs(
    passages_path: str | os.PathLike,
    propositions_path: str | os.PathLike,
    partial: bool = False,
) -> list[dict[str, Any]]:
    """Join passages.jsonl and propositions.jsonl on id, in the propositions file's order; a
    missing partner is a located error. `partial`: the propositions cover some articles only
    (squad-train: 156 of 442), so the passages of an article with no propositions at all make
    no pair; a passage of a covered article without propositions is still an error. Only the
    passages that pair are held (the passages file is streamed)."""
    props = _read_propositions(propositions_path)
    passages, unpaired = _paired_passages(passages_path, props)
    pairs = []
    for pid, (lineno, propositions) in props.items():
        if pid not in passages:
            raise DataError(
                propositions_path, lineno, "id", f"no passage {pid!r} in {passages_path}"
            )
        p = passages[pid]
        source = format_source(p["title"], p.get("section") or "", p["text"])
        pairs.append(_pair(pid, p["title"], source, propositions))
    covered = {p["title"] for p in pairs} if partial else None
    missing = [v for t, v in unpaired.items() if covered is None or t in covered]
    if missing:
        lineno, pid = min(missing)
        why = f"passage {pid!r} has no propositions in {propositions_path}"
        raise DataError(
            passages_path, lineno, "id", why + (" (its article has)" if partial else "")
        )
    return pairs


def _read_propositions(path: str | os.PathLike) -> dict[str, tuple[int, list[str]]]:
    """{passage id: (line, propositions)} of a propositions JSONL, ids unique, lists checked."""
    props: dict[str, tuple[int, list[str]]] = {}
    for lineno, row in numbered_jsonl(path, nonempty=("id",)):
        if row["id"] in props:
            raise DataError(path, lineno, "id", f"duplicate id {row['id']!r}")
        value = _check_propositions(row.get("propositions"), path, lineno, "propositions")
        props[row["id"]] = (lineno, value)
    return props


def _paired_passages(
    path: str | os.PathLike, props: dict[str, Any]
) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[int, str]]]:
    """(the passages of `path` whose id is in `props`, {title: (line, id) of its first passage
    without propositions}); the file is streamed, its ids must be unique."""
    seen: set[str] = set()
    kept: dict[str, dict[str, Any]] = {}
    unpaired: dict[str, tuple[int, str]] = {}
    for lineno, row in numbered_jsonl(path, required=("title", "text"), nonempty=("id",)):
        if row["id"] in seen:
            raise DataError(path, lineno, "id", f"duplicate passage id {row['id']!r}")
        seen.add(row["id"])
        if row["id"] in props:
            kept[row["id"]] = row
        else:
            unpaired.setdefault(row["title"], (lineno, row["id"]))
    return kept, unpaired


def load_hf_pairs(
    dataset: Any,
    split: str | None = "train",
    source_field: str = "sources",
    target_field: str = "targets",
) -> list[dict[str, Any]]:
    """Pairs from the released training data's format: a `datasets.Dataset` (or DatasetDict,
    or a directory written by `save_to_disk`) with `sources` strings and JSON-string `targets`.

    Errors name the dataset, the row index (as the line) and the column.
    """
    import datasets  # lazy: datasets (pyarrow) takes seconds to import; only `hf` needs it

    where = str(dataset) if isinstance(dataset, (str, os.PathLike)) else "<datasets.Dataset>"
    if isinstance(dataset, (str, os.PathLike)):
        if not Path(dataset).exists():
            raise DataError(
                dataset, None, None, "dataset directory not found (save_to_disk format)"
            )
        dataset = datasets.load_from_disk(str(dataset))
    if isinstance(dataset, datasets.DatasetDict):
        if split not in dataset:
            raise DataError(where, None, None, f"no split {split!r} (have {list(dataset)})")
        dataset = dataset[split]
    for name in (source_field, target_field):
        if name not in dataset.column_names:
            raise DataError(where, None, name, f"missing column (have {dataset.column_names})")
    pairs, seen = [], set()
    for i, row in enumerate(dataset):
        source = row[source_field]
        if not isinstance(source, str) or not source.strip():
            raise DataError(where, i, source_field, "empty or not a string")
        props = _check_propositions(row[target_field], where, i, target_field)
        pid = str(row["id"]) if "id" in row else str(i)
        _check_unique(pid, seen, where, i)
        pairs.append(_pair(pid, title_of_source(source), source, props))
    return pairs


def load_jsonl_pairs(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Pairs from JSONL rows `{"source", "target"}` (also the released `sources`/`targets`
    spelling) or passage-style `{"title", "section", "text", "propositions"}`. A row without
    an `id` gets its line number; ids (given or not) must be unique."""
    pairs, seen = [], set()
    for lineno, row in numbered_jsonl(path):
        pid = str(row.get("id", lineno))
        _check_unique(pid, seen, path, lineno, generated="id" not in row)
        if "source" in row or "sources" in row:
            sk, tk = ("source", "target") if "source" in row else ("sources", "targets")
            source = row[sk]
            if not isinstance(source, str) or not source.strip():
                raise DataError(path, lineno, sk, "empty or not a string")
            if tk not in row:
                raise DataError(path, lineno, tk, "missing")
            props = _check_propositions(row[tk], path, lineno, tk)
            title = row.get("title") or title_of_source(source)
        elif "text" in row:
            for name in ("title", "propositions"):
                if name not in row:
                    raise DataError(path, lineno, name, "missing")
            props = _check_propositions(row["propositions"], path, lineno, "propositions")
            title = row["title"]
            source = format_source(title, row.get("section") or "", row["text"])
        else:
            raise DataError(
                path, lineno, "source", "missing (need source/target or title/text/propositions)"
            )
        pairs.append(_pair(pid, title, source, props))
    return pairs


def title_bucket(title: str) -> float:
    """A fixed pseudo-random number in [0, 1) per title (SHA-1, stable across runs)."""
    return int(hashlib.sha1(title.encode("utf-8")).hexdigest()[:12], 16) / 16**12


def split_titles(
    titles: Iterable[str], val_fraction: float, test_fraction: float = 0.0
) -> tuple[set[str], set[str], set[str]]:
    """(train, validation, test) title sets of `split_articles` (its rule, on titles alone)."""
    ordered = sorted(set(titles), key=title_bucket)
    test = _take(ordered, set(), test_fraction, lambda b: b < test_fraction)
    lo, hi = test_fraction, test_fraction + val_fraction
    val = _take(ordered, test, val_fraction, lambda b: lo <= b < hi)
    return set(ordered) - val - test, val, test


def split_articles(
    pairs: Sequence[dict[str, Any]], val_fraction: float, test_fraction: float = 0.0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, validation, test) by article from the title's fixed hash b in [0, 1):
    b < `test_fraction` is test, `test_fraction` <= b < `test_fraction` + `val_fraction` is
    validation (carved from what would otherwise train), the rest train. With `test_fraction`
    0 this is the historical two-way split; with 0.1 the test articles are exactly the
    validation articles of the two-way split at 0.1 (the held-out articles of earlier runs).

    With a positive fraction and at least two articles left, that split is never empty: if no
    title hashes into its range, the remaining title with the smallest hash is used; the last
    title is never taken from training.
    """
    _, val, test = split_titles((p["title"] for p in pairs), val_fraction, test_fraction)
    out: tuple[list, list, list] = ([], [], [])
    for p in pairs:
        out[1 if p["title"] in val else 2 if p["title"] in test else 0].append(p)
    return out


def _take(titles: list[str], taken: set[str], fraction: float, rule: Any) -> set[str]:
    """The titles (of `titles`, sorted by hash, minus `taken`) a split at `fraction` takes."""
    left = [t for t in titles if t not in taken]
    if fraction <= 0 or len(left) < 2:
        return set()
    chosen = {t for t in left if rule(title_bucket(t))} or {left[0]}
    if len(chosen) == len(left):
        chosen.discard(left[-1])
    return chosen


def split_by_title(
    pairs: Sequence[dict[str, Any]], val_fraction: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train/validation split by article: a title goes to validation iff its hash < fraction
    (`split_articles` without a test split)."""
    train, val, _ = split_articles(pairs, val_fraction)
    return train, val
