"""Late chunking (Günther et al. 2024, jina-ai/late-chunking): units pooled from their
passage's token states instead of being encoded alone.

`retriever.late_chunking=true`: each context (`retriever.late_context`: the unit's passage, as
the retriever formats a passage: title prefix or (title, text) pair) goes once through the
document encoder, in windows of `max_length` tokens that share `retriever.late_overlap` tokens
when it is longer (the tokenizer's own overflow with `stride`); a token's state is taken from
the first window holding it (later windows only give it left context). A unit's vector is the
mean of the final token states whose characters (the fast tokenizer's `offset_mapping`) overlap
the unit's character span in the passage, then what the model does after its mean pooling
(sentence-transformers Dense / Normalize modules) and the spec's normalisation. Queries are
encoded as always.

Contract: `find_spans` locates units in their passage (a unit that is not a span is a
`ValueError`); `tokenize_late` turns `LateContext`s into one padded batch of windows plus a
sparse (unit x token) selection; `late_forward` turns that batch into one float32 vector per
unit, in the order of the contexts' rows. `check_late` says whether a loaded encoder can pool
spans. Runtimes: torch, and onnx / openvino through an exported graph of the token states.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import nn

from densex.retrieval.runtimes import exported_encoder

__all__ = [
    "LATE_INDEX",
    "LateContext",
    "check_late",
    "context_input",
    "find_spans",
    "late_forward",
    "token_states",
    "tokenize_late",
]

# batch keys of a late batch: the (unit, window * sequence + position) pairs of the selection,
# and the number of units (the selection's first dimension)
LATE_INDEX, LATE_UNITS = "late_index", "late_units"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class LateContext:
    """One context and its units: `rows` (int64, the units' rows), `text` (the encoder's input:
    a string or a (title, text) pair), `spans` (int64 [n, 2], the units' character spans in the
    passage text) and `start` (where the passage text begins in a string input; 0 for a pair)."""

    rows: np.ndarray
    text: str | tuple[str, str]
    spans: np.ndarray
    start: int = 0


def find_spans(passage: str, units: Sequence[str]) -> np.ndarray:
    """Character spans (int64 [n, 2]) of `units` in `passage`, searched in order from the end of
    the previous one (then from the start); a unit whose words are in the passage with other
    whitespace between them matches too. A unit found nowhere is a `ValueError` naming its
    position in `units`."""
    spans = np.zeros((len(units), 2), dtype=np.int64)
    cursor = 0
    for i, unit in enumerate(units):
        text = unit.strip()
        start = passage.find(text, cursor) if text else -1
        if start < 0 and text:
            start = passage.find(text)
        if start >= 0:
            end = start + len(text)
        else:
            pattern = r"\s+".join(re.escape(w) for w in text.split())
            found = re.compile(pattern).search(passage, cursor) if pattern else None
            found = found or (re.compile(pattern).search(passage) if pattern else None)
            if found is None:
                raise ValueError(f"unit {i} is not a span of its passage: {unit[:80]!r}")
            start, end = found.span()
        spans[i] = start, end
        cursor = end
    return spans


def context_input(formatted: str | tuple[str, str], text: str) -> tuple[str | tuple[str, str], int]:
    """(encoder input, where `text` starts in it) of a passage formatted for the encoder
    (`encoders.format_unit_texts`: prefixes end with the text; a pair's text is its second)."""
    if isinstance(formatted, tuple):
        return formatted, 0
    if not formatted.endswith(text):
        raise ValueError("the formatted passage does not end with its text")
    return formatted, len(formatted) - len(text)


def tokenize_late(encoder: Any, contexts: Sequence[LateContext], overlap: int) -> dict[str, Any]:
    """One batch of windows of `contexts` (`encoder.tokenizer`, fast; `encoder.max_length`
    tokens each, `overlap` shared with the previous window of the same context) with the
    selection of each unit's tokens (`LATE_INDEX`: int64 [2, nnz] of (unit, flat token); units
    in the order of the contexts and their rows) and `LATE_UNITS` (the number of units)."""
    tok, pair = encoder.tokenizer, isinstance(contexts[0].text, tuple)
    texts = [c.text for c in contexts]
    args = ([t[0] for t in texts], [t[1] for t in texts]) if pair else (texts,)
    enc = tok(
        *args, truncation="only_second" if pair else True, max_length=encoder.max_length,
        stride=overlap, return_overflowing_tokens=True, return_offsets_mapping=True,
        padding=True, return_tensors="pt",
    )  # fmt: skip
    sample = enc.pop("overflow_to_sample_mapping").numpy()
    offsets = enc.pop("offset_mapping").numpy()
    n_windows, width = offsets.shape[:2]
    base = np.concatenate([[0], np.cumsum([len(c.rows) for c in contexts])])
    pairs, seen = [], np.zeros(len(contexts), dtype=np.int64)
    for w in range(n_windows):
        c = int(sample[w])
        seq = np.array([-1 if s is None else s for s in enc.sequence_ids(w)], dtype=np.int64)
        pos = np.flatnonzero((seq == (1 if pair else 0)) & (offsets[w, :, 1] > offsets[w, :, 0]))
        if seen[c]:  # the first `overlap` text tokens were the previous window's
            pos = pos[overlap:]
        seen[c] += 1
        spans = contexts[c].spans + contexts[c].start
        tok_start, tok_end = offsets[w, pos, 0], offsets[w, pos, 1]
        hit = (tok_start[None, :] < spans[:, 1:]) & (tok_end[None, :] > spans[:, :1])
        unit, j = np.nonzero(hit)
        pairs.append(np.stack([base[c] + unit, w * width + pos[j]]))
    features = {k: v for k, v in enc.items() if k in INPUT_NAMES}
    features[LATE_INDEX] = torch.from_numpy(np.concatenate(pairs, axis=1).astype(np.int64))
    features[LATE_UNITS] = torch.zeros(int(base[-1]), dtype=torch.int8)
    return features


def check_late(encoder: Any) -> None:
    """For a `TextEncoder` whose spec sets `late_chunking`: a `ValueError` naming the key
    unless it can pool token spans: a fast tokenizer (offsets) and mean pooling (`mean`, or a
    sentence-transformers model whose Pooling module pools by mean alone)."""
    if not encoder.spec.late_chunking:
        return
    where = f"retriever.late_chunking: retriever {encoder.spec.name!r}"
    if not getattr(encoder.tokenizer, "is_fast", False):
        raise ValueError(f"{where}: its tokenizer is not a fast one (no character offsets)")
    if encoder.spec.late_overlap >= encoder.max_tokens // 2:
        raise ValueError(
            f"retriever.late_overlap={encoder.spec.late_overlap}: windows of {encoder.max_tokens}"
            f" text tokens need an overlap below {encoder.max_tokens // 2}"
        )
    if encoder.spec.backend != "sentence-transformers":
        return
    modules = list(encoder.model)
    pooling = modules[1] if len(modules) > 1 else None
    mode = getattr(pooling, "pooling_mode", None)
    if mode is None and getattr(pooling, "pooling_mode_mean_tokens", False):
        mode = pooling.get_pooling_mode_str() if hasattr(pooling, "get_pooling_mode_str") else None
    if type(pooling).__name__ != "Pooling" or mode != "mean":
        raise ValueError(
            f"{where}: its sentence-transformers modules pool by {mode or type(pooling).__name__}"
            ", not mean alone: a unit's span has no such pooling. Use a mean-pooling retriever"
            " (minilm, contriever, gtr) or retriever.late_chunking=false"
        )


def token_states(encoder: Any, features: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The final token states [windows, sequence, hidden] of a tokenised batch, in torch (the
    model's transformer: sentence-transformers' first module, or the HF model)."""
    inputs = {k: v for k, v in features.items() if k in INPUT_NAMES}
    if encoder.spec.backend == "sentence-transformers":
        return encoder.model[0](dict(inputs))["token_embeddings"]
    return encoder.model(**inputs).last_hidden_state


def late_forward(encoder: Any, features: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """One float32 vector per unit of a `tokenize_late` batch: the mean of its selected token
    states, then the model's modules after its pooling and the spec's normalisation."""
    inputs = {k: v for k, v in features.items() if k in INPUT_NAMES}
    if encoder.spec.runtime != "torch":
        states = _token_graph(encoder)(inputs).to(features["input_ids"].device)
    else:
        states = token_states(encoder, inputs)
    states = states.float()
    n_windows, width, hidden = states.shape
    index = features[LATE_INDEX]
    n_units = int(features[LATE_UNITS].shape[0])
    unit, token = index[0].to(states.device), index[1].to(states.device)
    picked = states.reshape(n_windows * width, hidden).index_select(0, token)
    summed = torch.zeros(n_units, hidden, dtype=states.dtype, device=states.device)
    summed.index_add_(0, unit, picked)
    counts = torch.bincount(unit, minlength=n_units).to(states.dtype)
    emb = summed / counts.clamp(min=1e-9).unsqueeze(1)
    if encoder.spec.backend == "sentence-transformers":
        for module in list(encoder.model)[2:]:  # Dense, Normalize, ...: after the pooling
            emb = module({"sentence_embedding": emb})["sentence_embedding"]
    emb = emb.float()
    if encoder.spec.similarity == "cos":
        emb = nn.functional.normalize(emb, p=2, dim=-1)
    return emb


def _token_graph(encoder: Any) -> Any:
    """`encoder`'s token states exported for its `spec.runtime` (`runtimes.exported_encoder`,
    keyed apart from the pooled graph), made on first use and kept as `encoder.token_graph`."""
    if encoder.token_graph is None:
        states = partial(token_states, encoder)
        encoder.token_graph = exported_encoder(encoder, encoder.model_path, states)
    return encoder.token_graph
