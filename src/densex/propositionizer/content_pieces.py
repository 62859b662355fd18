"""The word pieces that count as content for the copy student's end penalty
(`copy_decode.end_words`), read off its WordPiece vocabulary: a word-start piece that the
proposition metrics' `content_words` keeps (letters or digits, not a stop word, more than one
letter unless a digit), and a continuation piece (`##...`) that holds a letter or a digit.
A sentence's "the", "which", "it" or "," then never holds a proposition open: the teacher
drops or replaces them."""

from __future__ import annotations

from typing import Any

import torch

from densex.metrics.propositions import content_words

__all__ = ["content_vocab"]


def content_vocab(tokenizer: Any) -> torch.Tensor:
    """(V,) bool over `tokenizer`'s ids (added tokens included): True at the content pieces
    (module docstring), False at the special tokens."""
    vocab = tokenizer.get_vocab()
    out = torch.zeros(max(len(tokenizer), max(vocab.values()) + 1), dtype=torch.bool)
    special = set(tokenizer.all_special_ids)
    for piece, i in vocab.items():
        if i in special:
            continue
        if piece.startswith("##"):
            out[i] = any(c.isalnum() for c in piece[2:])
        else:
            out[i] = bool(content_words(piece))
    return out
