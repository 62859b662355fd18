"""Bit-exact resumption of Lightning training from any checkpoint, mid-epoch ones included.

Lightning restores weights, optimizer, schedulers and loop counters, but by itself it neither
fast-forwards a plain `DataLoader` to the batch a mid-epoch checkpoint was taken at (it warns
and replays the epoch from its start) nor restores the random generators (dropout). Two
pieces close the gap:
- `ResumableDataLoader`: a `DataLoader` with `state_dict`/`load_state_dict` (Lightning saves
  and restores them with every checkpoint); its state is the number of batches of the
  current epoch already trained on, which the first epoch after a restore skips;
- `RNGState`: a callback saving the torch (CPU and CUDA), numpy and Python generator states
  in every checkpoint and restoring them on resume.
With both (and `trainer.deterministic=true` on CPU) a run killed at any step and resumed is
meant to end with the same weights as an uninterrupted one; the SIGKILL test still sees small
differences (open, see tests/test_kill_resume.py). `newest_checkpoint(dir)` is what
`ckpt_path=last` resumes from.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pytorch_lightning.callbacks import Callback
from torch.utils.data import DataLoader


class ResumableDataLoader(DataLoader):
    """A `DataLoader` Lightning can resume mid-epoch (see the module docstring).

    `progress` returns the batches of the current epoch trained so far (Lightning's
    `fit_loop.epoch_loop.batch_progress.current.processed`, read when a checkpoint is saved);
    without it the state is 0 (epoch-level resumption, as a plain loader).
    """

    def __init__(self, *args: Any, progress: Callable[[], int] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._progress = progress
        self._skip = 0

    def state_dict(self) -> dict[str, int]:
        return {"batches_done": int(self._progress()) if self._progress is not None else 0}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._skip = int(state.get("batches_done", 0))

    def __iter__(self):
        iterator = super().__iter__()
        skip, self._skip = self._skip, 0
        if 0 < skip < len(self):  # a checkpoint at the end of an epoch skips nothing
            for _ in range(skip):  # the sampler's order is fixed by (seed, epoch): same batches
                next(iterator)
        return iterator


def epoch_batches_done(trainer: Any) -> int:
    """Batches of the current training epoch processed so far (0 without a fitting trainer)."""
    try:
        return int(trainer.fit_loop.epoch_loop.batch_progress.current.processed)
    except AttributeError:
        return 0


class RNGState(Callback):
    """Saves every random generator's state in each checkpoint and restores it on resume.

    The restored state is applied at `on_train_start`, after the sanity-check validation that
    Lightning runs again on resume (it draws random numbers, e.g. while loading the metric
    model), so the first resumed batch sees exactly the generators the killed run saw."""

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    @property
    def state_key(self) -> str:
        return "RNGState"

    def state_dict(self) -> dict[str, Any]:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state: dict[str, Any] = {
            "torch": torch.get_rng_state(),
            "numpy": [str(kind), torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
            "python": random.getstate(),
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._pending = dict(state)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self._pending is not None:
            self._apply(self._pending)
            self._pending = None

    @staticmethod
    def _apply(state: dict[str, Any]) -> None:
        if "torch" in state:
            torch.set_rng_state(state["torch"])
        if "numpy" in state:
            kind, keys, pos, has_gauss, cached = state["numpy"]
            np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
        if "python" in state:
            version, internal, gauss = state["python"]
            random.setstate((version, tuple(internal), gauss))
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])


def newest_checkpoint(directory: str | os.PathLike) -> Path | None:
    """The most recently written `*.ckpt` in `directory` (None when there is none): the
    mid-epoch step checkpoint, `last.ckpt` or the best one, whichever holds the latest state."""
    d = Path(directory)
    if not d.is_dir():
        return None
    ckpts = [p for p in d.glob("*.ckpt") if p.is_file()]
    if not ckpts:
        return None
    return max(ckpts, key=lambda p: (p.stat().st_mtime_ns, p.name))
