"""What one process encodes under late chunking: a shard's units as the contexts they are
spans of (`retrieval.late`).

`LateShardTexts` has `ShardTexts`' interface (`ids`, `batches`, `probe`): a shard's units are
grouped by their passage (`passage_row`) and located in its text (`late.find_spans`); the
context (`retriever.late_context`) is the passage, or its section (the run of consecutive
passages with its title and section, joined by spaces), formatted as the retriever formats a
unit (title prefix or pair); contexts are fed longest first, about `retriever.batch_size`
windows a batch. A context whose units straddle two shards is encoded once per shard (each
shard stays self-contained, so its bytes do not depend on which process encodes it). Nothing is truncated (long contexts run in windows):
every `trunc-<stem>.json` is empty. Memory: one shard's passages and units.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from densex.retrieval.encode_data import ShardTexts
from densex.retrieval.encoders import format_unit_texts
from densex.retrieval.late import LateContext, context_input, find_spans
from densex.utils.io import DataError, write_json
from densex.utils.shards import shard_stem

__all__ = ["LateShardTexts"]


class LateShardTexts(ShardTexts):
    """The contexts of one shard at a time (module doc); `get` gives (contexts, their order)."""

    def get(self, shard: tuple[int, int]) -> tuple[list, list[int]]:
        if shard == self._shard:
            return self._texts, self._order
        passages, units = self._tables()
        if passages is None:
            raise DataError(
                self.units_path, None, "retriever.late_chunking",
                "late chunking pools each unit in its passage: this units file has no passages "
                "table beside it (build it with index.py stage=units)",
            )  # fmt: skip
        start, n = shard[0], shard[1] - shard[0]
        prow = units.table.column("passage_row").slice(start, n).to_numpy()
        unit_texts = units.slice("text", *shard)
        by_passage = np.argsort(prow, kind="stable")  # units of a passage keep file order
        groups = np.split(by_passage, np.flatnonzero(np.diff(prow[by_passage])) + 1)
        rows = np.array([prow[g[0]] for g in groups], dtype=np.int64)
        texts = passages.take("text", rows)
        spans = [self._spans(g, start, t, unit_texts, units) for g, t in zip(groups, texts)]
        units_of = [start + g.astype(np.int64) for g in groups]
        if self.spec.late_context == "section":
            contexts = _section_contexts(self.spec, passages, rows, units_of, spans)
        else:
            titles = passages.take("title", rows)
            contexts = [_context(self.spec, *c) for c in zip(units_of, titles, texts, spans)]
        del passages, units
        sizes = np.array([_chars(c) for c in contexts])
        order = np.argsort(-sizes, kind="stable").tolist()
        write_json(self.out / f"trunc-{shard_stem(*shard)}.json", [], indent=None)
        self._shard, self._texts, self._order = shard, contexts, order
        return contexts, order

    def _spans(
        self, group: np.ndarray, start: int, text: str, unit_texts: list, units: Any
    ) -> np.ndarray:
        """The character spans of one passage's units (`group`: their offsets in the shard)
        in its text; a unit that is not a span is a located `DataError` naming the key."""
        try:
            return find_spans(text, [unit_texts[i] for i in group])
        except ValueError as e:
            i = int(str(e).split()[1])
            uid = units.slice("id", start + int(group[i]), start + int(group[i]) + 1)[0]
            raise DataError(
                self.units_path, start + int(group[i]) + 1, "retriever.late_chunking",
                f"unit {uid!r} is not a span of its passage ({e}): late chunking pools a unit's "
                "span of its passage's tokens; generated units (propositions) have none. Use "
                "retriever.late_chunking=false, or granularity=sentence / passage",
            ) from None  # fmt: skip

    def batches(self, shard: tuple[int, int], batch_size: int) -> Iterator[list[LateContext]]:
        """The shard's contexts, longest first: at most `batch_size` contexts a batch, and at
        most about `batch_size` full windows of text (4 characters a token; a longer context
        is a batch of its own)."""
        contexts, order = self.get(shard)
        budget = batch_size * self.encoder.max_length * 4
        batch: list[LateContext] = []
        size = 0
        for i in order:
            n = _chars(contexts[i])
            if batch and (len(batch) >= batch_size or size + n > budget):
                yield batch
                batch, size = [], 0
            batch.append(contexts[i])
            size += n
        if batch:
            yield batch

    def probe(self, shard: tuple[int, int]) -> list[LateContext]:
        """One context of `shard` whose rows are negative (encoded, never written)."""
        contexts, order = self.get(shard)
        c = contexts[order[0]]
        return [LateContext(rows=-1 - c.rows, text=c.text, spans=c.spans, start=c.start)]


def _chars(context: LateContext) -> int:
    """Characters of a context's input (both texts of a pair)."""
    text = context.text
    return len(text) if isinstance(text, str) else len(text[0]) + len(text[1])


def _context(spec: Any, rows: np.ndarray, title: str, text: str, spans: np.ndarray) -> LateContext:
    """The `LateContext` of units `rows` at `spans` of `text`, formatted as the retriever
    formats a passage titled `title`."""
    inp, offset = context_input(format_unit_texts(spec, [title], [text])[0], text)
    return LateContext(rows=rows, text=inp, spans=spans, start=offset)


def _section_contexts(
    spec: Any, passages: Any, rows: np.ndarray, units_of: list[np.ndarray],
    spans: list[np.ndarray],
) -> list[LateContext]:  # fmt: skip
    """`late_context=section`: one context per section (a run of consecutive passages with the
    same title and section) holding passages `rows`: its passages' texts joined by a space,
    each unit's span shifted to its passage's place in it."""
    lo, hi = _section_bounds(passages, int(rows.min()), int(rows.max()) + 1)
    keys = list(zip(passages.slice("title", lo, hi), passages.slice("section", lo, hi)))
    texts = passages.slice("text", lo, hi)
    new = np.array([i == 0 or keys[i] != keys[i - 1] for i in range(len(keys))])
    section = np.cumsum(new) - 1  # per row of lo..hi
    firsts = np.flatnonzero(new)
    lengths = np.array([len(t) + 1 for t in texts], dtype=np.int64)
    before = np.cumsum(lengths) - lengths
    offset = before - before[firsts[section]]  # where each passage starts in its section
    contexts = []
    for s in np.unique(section[rows - lo]):
        mine = np.flatnonzero(section[rows - lo] == s)  # this shard's passages of section s
        a = firsts[s]
        b = firsts[s + 1] if s + 1 < len(firsts) else hi - lo
        shifted = [spans[i] + offset[rows[i] - lo] for i in mine]
        ctx_rows = np.concatenate([units_of[i] for i in mine])
        joined = " ".join(texts[a:b])
        contexts.append(_context(spec, ctx_rows, keys[a][0], joined, np.concatenate(shifted)))
    return contexts


def _section_bounds(passages: Any, lo: int, hi: int, step: int = 256) -> tuple[int, int]:
    """Rows [lo, hi) widened to whole sections: while the row before `lo` (after `hi`) has the
    title and section of row `lo` (`hi - 1`), read `step` rows at a time."""

    def key(a: int, b: int) -> list[tuple[str, str]]:
        return list(zip(passages.slice("title", a, b), passages.slice("section", a, b)))

    first, last, n = key(lo, lo + 1)[0], key(hi - 1, hi)[0], len(passages)
    while lo > 0:
        a = max(0, lo - step)
        keys = key(a, lo)
        k = len(keys)
        while k > 0 and keys[k - 1] == first:
            k -= 1
        lo = a + k
        if k > 0:
            break
    while hi < n:
        keys = key(hi, min(n, hi + step))
        k = 0
        while k < len(keys) and keys[k] == last:
            k += 1
        hi += k
        if k < len(keys):
            break
    return lo, hi
