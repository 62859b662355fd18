"""`retriever=hash`: signed feature hashing of DPR tokens, a retriever without a model.

A text becomes the lower-cased tokens of DPR's `SimpleTokenizer` (`metrics.answers.dpr_words`,
the tokens `has_answer` matches answers on); each token is hashed with CRC-32 of its UTF-8
bytes (deterministic in every process and on every machine, unlike Python's salted `hash`).
Bits 0-30 pick the bucket (`(h & 0x7FFFFFFF) % dim`), bit 31 the sign (set: -1), as
scikit-learn's `HashingVectorizer(alternate_sign=True)` does with MurmurHash3, so colliding
tokens cancel on average instead of piling up. A text's vector is its signed term counts per
bucket, L2-normalised (a text without tokens stays the zero vector); inner product = cosine.

`HashEncoder` has `TextEncoder`'s interface, so Lightning encoding and query encoding run it
unchanged: `tokenize` (in the DataLoader's collate) does the string work and returns compact
tensors (one bucket index and one sign per token); `forward` scatters them into [B, dim] on
whatever device the module is on. It is the instrument that measures the pipeline at millions
of units on CPUs, and a lexical baseline in its own right.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from densex.metrics.answers import dpr_words

# `max_length` / `max_tokens` of an encoder that never truncates.
NO_TRUNCATION = 2**31 - 1
_LOW31 = np.int64(0x7FFFFFFF)


def _flat(text: str | tuple[str, str]) -> str:
    """A (title, text) pair (`title: pair`) is hashed as "title text"."""
    return text if isinstance(text, str) else f"{text[0]} {text[1]}"


def token_hashes(tokens: Sequence[str]) -> np.ndarray:
    """CRC-32 of each token's UTF-8 bytes, as int64 in [0, 2**32)."""
    return np.fromiter(
        (zlib.crc32(t.encode("utf-8")) for t in tokens), dtype=np.int64, count=len(tokens)
    )


def buckets_and_signs(hashes: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Bucket (bits 0-30 modulo `dim`, int64) and sign (bit 31: -1.0, else +1.0, float32)."""
    buckets = (hashes & _LOW31) % dim
    signs = (1 - 2 * (hashes >> 31)).astype(np.float32)
    return buckets, signs


class HashEncoder(nn.Module):
    """Texts -> L2-normalised signed hashed term counts, float32 [B, dim]; no weights."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
            raise ValueError(f"hash dim must be an integer >= 1, got {dim!r}")
        self._dim = int(dim)
        self.max_length = NO_TRUNCATION
        self.pads = False  # sparse cells, no padding: encoding need not sort by length

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def max_tokens(self) -> int:
        """Every token counts: nothing is truncated."""
        return NO_TRUNCATION

    def token_lengths(self, texts: Sequence[str] | Sequence[tuple[str, str]]) -> np.ndarray:
        """Tokens per text (int64), the tokens `tokenize` hashes."""
        return np.fromiter((len(dpr_words(_flat(t))) for t in texts), np.int64, count=len(texts))

    def tokenize(self, texts: Sequence[str] | Sequence[tuple[str, str]]) -> dict[str, torch.Tensor]:
        """The batch's non-zero cells, already normalised: `hash_index` (int64 [M], row * dim +
        bucket, ascending), `hash_value` (float32 [M]) and `hash_lengths` (int64 [B], tokens
        per text). Sparse, so neither this nor the transfer to the device scales with dim."""
        lengths: list[int] = []
        tokens: list[str] = []
        for text in texts:
            words = dpr_words(_flat(text))
            lengths.append(len(words))
            tokens.extend(words)
        n_tok = np.array(lengths, dtype=np.int64)
        buckets, signs = buckets_and_signs(token_hashes(tokens), self._dim)
        cells = np.repeat(np.arange(len(n_tok), dtype=np.int64), n_tok) * self._dim + buckets
        index, where = np.unique(cells, return_inverse=True)
        counts = np.bincount(where, weights=signs, minlength=len(index))  # exact integers
        rows = index // self._dim
        norms = np.sqrt(np.bincount(rows, weights=counts * counts, minlength=len(n_tok)))
        with np.errstate(invalid="ignore", divide="ignore"):
            values = counts / norms[rows]  # a cell that cancelled to 0 in a zero row: 0/0
        values = np.nan_to_num(values, nan=0.0).astype(np.float32)
        return {
            "hash_index": torch.from_numpy(index),
            "hash_value": torch.from_numpy(values),
            "hash_lengths": torch.from_numpy(n_tok),
        }

    def forward(self, features: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The cells of `tokenize` written into a dense float32 [B, dim] on the features'
        device (rows without tokens, or whose counts all cancel, are zero). Always float32: a
        retriever's mixed `precision` (autocast) does not apply."""
        index, value = features["hash_index"], features["hash_value"]
        n = len(features["hash_lengths"])
        out = torch.zeros(n * self._dim, dtype=torch.float32, device=index.device)
        out[index] = value.to(torch.float32)
        return out.view(n, self._dim)
