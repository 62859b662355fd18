"""Gold passages of a question set (qrels): BEIR/TREC-style files and SQuAD's paragraphs.

A qrels mapping is `{question_id: {passage_id: relevance}}` (relevance > 0 = relevant).
- `read_qrels(path)`: BEIR's `qrels/*.tsv` (`query-id<TAB>corpus-id<TAB>score`, header line
  optional) or TREC's `qid 0 docid rel` (whitespace separated, 4 columns).
- `squad_qrels(squad_json, passages)`: the passage(s) that hold each SQuAD v1.1 question's
  annotated answer span. Passages are the corpus's 100-word chunks of a paragraph `<Article>#<j>`,
  ids `<Article>#<j>-<c>` (how `corpus.segment` names them); the chunk holding an answer's
  `answer_start` is found by aligning the chunks' non-whitespace characters to the paragraph's
  (chunks are the paragraph's sentences re-joined by single spaces). Every distinct annotated
  span counts; a paragraph whose chunks do not align (edited text) falls back to all its
  chunks, counted in `SquadQrels.unaligned`.
- `load_dataset_qrels(dataset, passages)`: the `qrels` of a `DatasetSpec`
  (`{format: beir|trec|squad, path}`), or None when it has none.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from densex.data.spec import DatasetSpec
from densex.utils.io import DataError, numbered_lines, read_json
from densex.utils.records import Record

Qrels = dict[str, dict[str, float]]

_WS = re.compile(r"\s+")


def read_qrels(path: str | os.PathLike) -> Qrels:
    """BEIR TSV (`query-id corpus-id score`, optional header) or TREC (`qid 0 docid rel`)."""
    path = Path(path)
    out: Qrels = {}
    for lineno, line in numbered_lines(path):  # bytes decoded per line: a bad byte is located
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        cols = line.split("\t") if "\t" in line else line.split()
        if lineno == 1 and cols[0].strip().lower() in ("query-id", "query_id", "qid"):
            continue
        if len(cols) == 4:  # TREC: qid iter docid rel
            qid, _, did, rel = cols
        elif len(cols) == 3:
            qid, did, rel = cols
        else:
            raise DataError(path, lineno, None, f"expected 3 (BEIR) or 4 (TREC) columns: {line!r}")
        try:
            value = float(rel)
        except ValueError as e:
            raise DataError(path, lineno, "score", f"not a number: {rel!r}") from e
        out.setdefault(qid.strip(), {})[did.strip()] = value
    if not out:
        raise DataError(path, None, None, "no qrels")
    return out


@dataclass
class SquadQrels:
    """`qrels` per question id plus how many questions fell back to the whole paragraph."""

    qrels: Qrels = field(default_factory=dict)
    unaligned: int = 0
    missing_paragraph: int = 0


def _nonws_offsets(text: str) -> list[int]:
    """For each character offset of `text`, the number of non-whitespace characters before it."""
    out, n = [], 0
    for ch in text:
        out.append(n)
        if not ch.isspace():
            n += 1
    out.append(n)
    return out


def squad_qrels(squad_json: str | os.PathLike, passages: Sequence[Record]) -> SquadQrels:
    """The chunk(s) of each question's SQuAD paragraph that hold an annotated answer span."""
    data = read_json(squad_json)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DataError(squad_json, None, "data", "not a SQuAD v1.1 file (no 'data' list)")
    chunks: dict[str, list[tuple[int, str, str]]] = {}
    for p in passages:
        base, sep, c = str(p["id"]).rpartition("-")
        if sep and c.isdigit():
            chunks.setdefault(base, []).append((int(c), str(p["id"]), str(p["text"])))
    result = SquadQrels()
    for article in data["data"]:
        title = article.get("title")
        for j, paragraph in enumerate(article.get("paragraphs") or []):
            parts = sorted(chunks.get(f"{title}#{j}", []))
            qas = paragraph.get("qas") or []
            if not parts:
                result.missing_paragraph += len(qas)
                continue
            context = str(paragraph.get("context") or "")
            before = _nonws_offsets(context)
            sizes = [len(_WS.sub("", t)) for _, _, t in parts]
            aligned = _WS.sub("", context) == "".join(_WS.sub("", t) for _, _, t in parts)
            starts = [0]
            for s in sizes[:-1]:
                starts.append(starts[-1] + s)
            for q in qas:
                qid = str(q.get("id"))
                gold: dict[str, float] = {}
                if aligned:
                    for a in q.get("answers") or []:
                        start = a.get("answer_start")
                        if isinstance(start, int) and 0 <= start < len(context):
                            c = bisect.bisect_right(starts, before[start]) - 1
                            gold[parts[c][1]] = 1.0
                if not gold:
                    result.unaligned += 1
                    gold = {pid: 1.0 for _, pid, _ in parts}
                result.qrels[qid] = gold
    return result


def load_dataset_qrels(dataset: DatasetSpec, passages: Sequence[Record]) -> Qrels | None:
    """The dataset's `qrels` (`{format: beir|trec|squad, path}`), read; None if unset."""
    node = dataset.qrels
    if node is None or not node.path:
        return None
    fmt = str(node.format or "beir")
    if fmt == "squad":
        return squad_qrels(node.path, passages).qrels
    if fmt in ("beir", "trec"):
        return read_qrels(node.path)
    raise ValueError(f"unknown qrels format {fmt!r} (beir | trec | squad)")
