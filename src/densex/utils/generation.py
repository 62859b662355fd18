"""Seq2seq generation in length-sorted batches: the one loop the propositionizer and the QA
reader share (sorting by length keeps padding, and so wasted compute, small)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["eos_ids", "generate_sorted", "hit_max_new_tokens"]


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """Every token id that ends a generation: the generation config's (an int or a list) and
    the tokenizer's."""
    ids: set[int] = set()
    config = getattr(model, "generation_config", None)
    for value in (getattr(config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(int(v) for v in value)
    return ids


def hit_max_new_tokens(out: torch.Tensor, eos: set[int], max_new_tokens: int) -> list[bool]:
    """Per row of a seq2seq `generate` output: were `max_new_tokens` tokens generated with no
    end-of-sequence among them (a likely cut-off)? Column 0 is the decoder start token, which is
    not generated and may be anything (T5: pad; BART: eos), so it is left out; a row that ended
    early has an eos (and then padding), a row without one ran to the full generated width."""
    generated = out[:, 1:]
    ended = torch.zeros(generated.shape[0], dtype=torch.bool, device=generated.device)
    for token in eos:
        ended |= (generated == token).any(dim=1)
    full = generated.shape[1] >= max_new_tokens
    return [bool(full and not e) for e in ended.tolist()]


@torch.inference_mode()
def generate_sorted(
    model: Any,
    tokenizer: Any,
    sources: Sequence[str],
    batch_size: int,
    max_new_tokens: int,
    num_beams: int = 1,
    lengths: Sequence[int] | None = None,
    on_batch: Callable[[int], None] | None = None,
    device: Any = None,
    decode: Callable[[torch.Tensor, Sequence[str]], list[str]] | None = None,
    generate_kwargs: dict[str, Any] | None = None,
) -> tuple[list[str], list[bool]]:
    """Decode every source (greedy, or beam search with `num_beams` > 1), longest first in
    batches of `batch_size`, inputs truncated at `tokenizer.model_max_length`.

    Returns the texts in input order and, per text, whether it hit `max_new_tokens` without an
    end-of-sequence token. `lengths` (token counts) sets the order when the caller has them;
    `on_batch(n)` is called after each batch of n sources (progress); inputs go to `device`
    (default: the model's); `decode(ids, batch_sources)` turns a batch's generated ids into
    texts (default: `tokenizer.batch_decode` without special tokens); `generate_kwargs`
    (decoding rules such as `no_repeat_ngram_size`) go to every `generate` call.
    """
    if lengths is None:
        lengths = [len(ids) for ids in tokenizer(list(sources), truncation=True)["input_ids"]]
    order = sorted(range(len(sources)), key=lambda i: -lengths[i])
    texts: list[str] = [""] * len(sources)
    cut: list[bool] = [False] * len(sources)
    eos = eos_ids(model, tokenizer)
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        enc = tokenizer(
            [sources[i] for i in idx], return_tensors="pt", padding=True, truncation=True
        ).to(model.device if device is None else device)
        out = model.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            num_beams=num_beams,
            do_sample=False,
            **(generate_kwargs or {}),
        )
        batch = [sources[i] for i in idx]
        if decode is None:
            decoded = tokenizer.batch_decode(out, skip_special_tokens=True)
        else:
            decoded = decode(out, batch)
        hit = hit_max_new_tokens(out, eos, max_new_tokens)
        for row, i in enumerate(idx):
            texts[i], cut[i] = decoded[row], hit[row]
        if on_batch is not None:
            on_batch(len(idx))
    return texts, cut
