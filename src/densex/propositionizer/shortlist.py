"""The copy student's vocabulary shortlist: the tokens its vocabulary path may write besides
those of its inputs.

A student that copies writes few tokens that its source lacks: the teacher's propositions of
the squad-open training articles add 3,453 of the 30,523 word pieces to their per-sentence
inputs (restated subjects and verbs, "is", "was", antecedents of earlier sentences). Decoding
with a shortlist (`propositionizer.shortlist=FILE`, `copy_decode.with_shortlist`) computes the
vocabulary logits for those pieces plus the batch's source tokens only (about 5,000), instead
of the whole vocabulary: the projection that is half of a decoding step's multiply-adds
shrinks about sixfold (measured: 1.11x for beam 4, 1.15x for greedy; docs/propositionizer.md). The file is a
JSON object {"ids": [...], "vocab_size": V, "pairs": N}; `build_shortlist` writes it from
training pairs (`scripts/copy_shortlist.py`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from densex.propositionizer.surface import COPY_MODEL_TYPE
from densex.utils.io import atomic_open

__all__ = ["build_shortlist", "load_shortlist", "model_shortlist", "save_shortlist"]


def build_shortlist(tokenizer: Any, pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The shortlist of (source, target) text pairs: every target token id that its own
    source does not contain, sorted."""
    ids: set[int] = set()
    n = 0
    for source, target in pairs:
        have = set(tokenizer(source, add_special_tokens=False)["input_ids"])
        ids.update(
            t for t in tokenizer(target, add_special_tokens=False)["input_ids"] if t not in have
        )
        n += 1
    return {"ids": sorted(ids), "vocab_size": len(tokenizer), "pairs": n}


def save_shortlist(shortlist: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write `shortlist` as JSON atomically; the path."""
    out = Path(path)
    with atomic_open(out) as f:
        f.write(json.dumps(shortlist))
    return out


def load_shortlist(path: str | os.PathLike, vocab_size: int) -> torch.Tensor:
    """The token ids of a shortlist file, checked against the model's vocabulary size."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        ids = [int(i) for i in data["ids"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"{p}: not a shortlist file ({e}); build one with scripts/copy_shortlist.py"
        ) from e
    if data.get("vocab_size") != vocab_size or any(not 0 <= i < vocab_size for i in ids):
        raise ValueError(
            f"{p}: field vocab_size {data.get('vocab_size')} or its ids do not fit this model's "
            f"vocabulary of {vocab_size} (a shortlist of another tokenizer?)"
        )
    return torch.tensor(ids, dtype=torch.long)


def model_shortlist(model: Any, path: str | os.PathLike) -> torch.Tensor:
    """`load_shortlist` for a loaded model, which must be the copy student."""
    kind = model.config.model_type
    if kind != COPY_MODEL_TYPE:
        raise ValueError(
            f"propositionizer.shortlist is for the copy student ({COPY_MODEL_TYPE}), not {kind!r}"
        )
    return load_shortlist(path, model.config.vocab_size)
