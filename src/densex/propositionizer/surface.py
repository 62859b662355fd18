"""Generated ids of an uncased model -> propositions in the source's own surface form.

A generated proposition is a sequence of wordpieces. Each maximal run of them that also occurs
in the source (the longest match; on a tie the one continuing the previous run, then the
earliest) is replaced by the source's own characters between the run's first and last token
offsets (the fast tokenizer's `offset_mapping`), so copied text keeps the passage's casing,
spacing and accents although the model's vocabulary is lower-cased. Tokens found nowhere in
the source are written as the vocabulary spells them (`##` pieces joined to the word before).
Propositions are split at the `[PROP]` separator, end at the end token, get an upper-case
first letter (the teacher's style; a copied run from mid-sentence starts lower-case) and are
returned as the JSON list the parsers read (`format_target`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from densex.propositionizer.pairs import format_target

__all__ = ["COPY_MODEL_TYPE", "PROP_TOKEN", "decode_propositions", "split_ids"]

PROP_TOKEN = "[PROP]"  # the one token between two propositions of a copy-aware target
COPY_MODEL_TYPE = "densex-copy-lm"  # its config.json `model_type` (`copy_lm.CopyLMConfig`)

_NO_SPACE_BEFORE = tuple(".,;:!?)]}%'")


def split_ids(ids: Sequence[int], separator: int, end: int, skip: set[int]) -> list[list[int]]:
    """The propositions' token ids: `ids` up to the first `end`, without `skip` ids (start,
    padding), cut at every `separator`; empty propositions dropped."""
    props: list[list[int]] = [[]]
    for token in ids:
        if token == end:
            break
        if token in skip:
            continue
        if token == separator:
            props.append([])
        else:
            props[-1].append(token)
    return [p for p in props if p]


def _runs(tokens: Sequence[int], source: Sequence[int]) -> list[tuple[int, int, int]]:
    """(start in `tokens`, start in `source`, length) of the copied runs; source start -1 for
    a token that occurs nowhere in the source."""
    where: dict[int, list[int]] = defaultdict(list)
    for p, token in enumerate(source):
        where[token].append(p)
    runs, i, prev_end = [], 0, -1
    while i < len(tokens):
        best = (0, False, 0, -1)  # (length, continues the previous run, -start, start)
        for p in where.get(tokens[i], ()):
            n = 1
            while i + n < len(tokens) and p + n < len(source) and source[p + n] == tokens[i + n]:
                n += 1
            best = max(best, (n, p == prev_end, -p, p))
        n, _, _, p = best
        runs.append((i, p, max(n, 1)))
        prev_end = p + n if n else -1
        i += max(n, 1)
    return runs


def _join(pieces: list[tuple[str, bool]]) -> str:
    """Concatenate (text, attaches to the previous piece) pieces with single spaces."""
    out = ""
    for text, attach in pieces:
        if out and not attach and not text.startswith(_NO_SPACE_BEFORE) and not out.endswith("("):
            out += " "
        out += text
    return out


def render(
    tokens: Sequence[int], source: str, src_ids: Sequence[int], offsets: Sequence, tok: Any
) -> str:
    """One proposition's text (module docstring): copied runs from `source` through its
    token `offsets`, other tokens from the vocabulary."""
    pieces = []
    for i, p, n in _runs(tokens, src_ids):
        if p < 0:
            piece = tok.convert_ids_to_tokens(int(tokens[i]))
            pieces.append((piece.removeprefix("##"), piece.startswith("##")))
            continue
        text = source[offsets[p][0] : offsets[p + n - 1][1]]
        first = tok.convert_ids_to_tokens(int(src_ids[p]))
        pieces.append((text, first.startswith("##")))
    text = _join(pieces).strip()
    return text[:1].upper() + text[1:]


def decode_propositions(
    tokenizer: Any, generated: Any, sources: Sequence[str], separator: int
) -> list[str]:
    """Each generated row (ids, start token first) as the JSON list of its propositions, in
    the surface form of its source (module docstring)."""
    enc = tokenizer(list(sources), truncation=True, return_offsets_mapping=True)
    end = tokenizer.sep_token_id
    skip = {tokenizer.cls_token_id, tokenizer.pad_token_id}
    texts = []
    for row, ids, offsets, source in zip(
        generated, enc["input_ids"], enc["offset_mapping"], sources
    ):
        row = row.tolist() if hasattr(row, "tolist") else list(row)
        keep = [j for j, (a, b) in enumerate(offsets) if b > a]  # no special tokens
        src_ids, src_off = [ids[j] for j in keep], [offsets[j] for j in keep]
        props = [
            render(p, source, src_ids, src_off, tokenizer)
            for p in split_ids(row, separator, end, skip)
        ]
        texts.append(format_target([p for p in props if p]))
    return texts
