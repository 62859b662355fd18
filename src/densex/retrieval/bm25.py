"""BM25 sparse baseline with bm25s, behind the same `search(queries, n)` as dense searchers.

Lucene scoring with pyserini's defaults (k1=0.9, b=0.4). Like Lucene, a unit that shares no
term with the query is not a hit: its row is -1, so passage search sees an exhausted list
instead of arbitrary zero-score units.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
from bm25s.tokenization import Tokenizer

from densex.metrics.propositions import snowball
from densex.retrieval.spec import BM25Spec
from densex.utils.bm25 import bm25_index, bm25_search, bm25_tokenizer
from densex.utils.integrity import DamagedArtifact, file_records, verify_files
from densex.utils.io import DataError, mkdtemp, read_json, read_jsonl, write_json, write_manifest
from densex.utils.records import Record


def bm25_settings(spec: BM25Spec) -> dict[str, Any]:
    """The settings of `spec` as the manifest and the cache key record them."""
    return dataclasses.asdict(spec)


def _tokenizer(spec: BM25Spec) -> Tokenizer:
    return bm25_tokenizer(
        lower=spec.lower,
        stopwords=spec.stopwords or [],
        # bm25s stems one word at a time: the Stemmer object (its `stemWord`), not `stemWords`
        stemmer=snowball(spec.stemmer),
    )


def unit_text(spec: BM25Spec, unit: Record) -> str:
    """The text BM25 indexes for a unit: its title + `title_sep` + text with `title: prefix`."""
    title = (unit.get("title") or "").strip()
    if spec.title == "prefix" and title:
        return title + spec.title_sep + unit["text"]
    return unit["text"]


class BM25Searcher:
    """A bm25s index over units; rows are line order of the units file."""

    def __init__(
        self,
        model: bm25s.BM25,
        tokenizer: Tokenizer,
        unit_ids: Sequence[str],
        spec: BM25Spec,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.unit_ids, self.spec, self.settings = list(unit_ids), spec, bm25_settings(spec)
        self.info: dict[str, Any] = {}

    @property
    def ntotal(self) -> int:
        return len(self.unit_ids)

    @classmethod
    def build(cls, units_path: str | Path, spec: BM25Spec) -> BM25Searcher:
        """Index every unit of `units_path` under `spec` (a `DataError` when there is none)."""
        ids, texts = [], []
        for row in read_jsonl(units_path, required=("id", "text")):
            ids.append(str(row["id"]))
            texts.append(unit_text(spec, row))
        if not ids:
            raise DataError(units_path, None, None, "no units to index")
        tok = _tokenizer(spec)
        model = bm25_index(
            texts,
            tok,
            k1=spec.k1,
            b=spec.b,
            method=spec.method,
            allow_empty=True,  # a unit without an indexed term is the empty token
        )
        return cls(model, tok, ids, spec)

    def search(self, queries: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores float32 [nq, n], rows int64 [nq, n]); -1 past the units that match a term."""
        scores = np.full((len(queries), n), -np.inf, dtype=np.float32)
        rows = np.full((len(queries), n), -1, dtype=np.int64)
        k = min(n, self.ntotal)
        if k <= 0 or not len(queries):
            return scores, rows
        docs, s = bm25_search(self.model, self.tokenizer, queries, k, allow_empty=True)
        hit = s > 0
        scores[:, :k] = np.where(hit, s, -np.inf)
        rows[:, :k] = np.where(hit, docs, -1)
        return scores, rows

    def save(self, out_dir: str | Path, **manifest: Any) -> Path:
        """Write to a temporary directory, then rename it into place (complete or absent)."""
        out = Path(out_dir)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = mkdtemp(out.parent, prefix=f".{out.name}.")
        try:
            self.model.save(str(tmp), show_progress=False)
            self.tokenizer.save_vocab(str(tmp))
            write_json(tmp / "unit_ids.json", self.unit_ids, indent=None)
            names = sorted(p.name for p in tmp.iterdir() if p.is_file())
            write_manifest(
                tmp / "manifest.json",
                kind="bm25",
                settings=self.settings,
                ntotal=self.ntotal,
                files=file_records(tmp, names),  # size + hash, verified on load
                **manifest,
            )
            if out.exists():  # a concurrent job finished first: keep theirs
                shutil.rmtree(tmp)
            else:
                os.replace(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return out

    @classmethod
    def load(cls, index_dir: str | Path) -> BM25Searcher:
        d = Path(index_dir)
        man = read_json(d / "manifest.json")
        if man.get("kind") != "bm25":
            raise DataError(d / "manifest.json", None, "kind", "not a bm25 index manifest")
        problems = verify_files(d, man.get("files") or {"unit_ids.json": None})
        if problems:
            path, why = problems[0]
            err = DamagedArtifact(path, None, None, f"damaged bm25 index: {why}")
            err.problems = problems
            raise err
        spec = BM25Spec(**man["settings"])
        tok = _tokenizer(spec)
        tok.load_vocab(str(d))
        model = bm25s.BM25.load(str(d), show_progress=False)
        return cls(model, tok, read_json(d / "unit_ids.json"), spec)
