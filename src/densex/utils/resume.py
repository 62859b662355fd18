"""Bit-exact resumption of Lightning training from any checkpoint, mid-epoch ones included.

Lightning restores weights, optimizer, schedulers and loop counters, but by itself it neither
fast-forwards a plain `DataLoader` to the batch a mid-epoch checkpoint was taken at (it warns
and replays the epoch from its start) nor restores the random generators (dropout). Two
pieces close the gap:
- `ResumableDataLoader`: a `DataLoader` with `state_dict`/`load_state_dict` (Lightning saves
  and restores them with every checkpoint); its state is the epoch, the number of its batches
  already trained on (skipped, in that epoch's order, by the first iterator after a restore)
  and the state of the loader's own generator (workers' base seed; a plain `DataLoader` draws
  it from the global torch generator);
- `RNGState`: a callback saving the torch (CPU and CUDA), numpy and Python generator states
  in every checkpoint and restoring them at train start; a fresh run reseeds there instead.
With both (and `trainer.deterministic=true` on CPU) a run killed at any step and resumed ends
with the same weights and optimizer state, bit for bit, as an uninterrupted one
(tests/test_kill_resume.py). `StepTrace` logs per-step hashes of the batch, generators,
weights and optimizer to find where two runs part. `newest_checkpoint(dir)` is what
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
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from torch.utils.data import DataLoader

from densex.utils.logging import get_logger

log = get_logger(__name__)


class ResumableDataLoader(DataLoader):
    """A `DataLoader` Lightning can resume mid-epoch (see the module docstring).

    `progress` returns (epoch, batches of that epoch trained so far) (Lightning's
    `current_epoch` and `fit_loop.epoch_loop.batch_progress.current.processed`, read when a
    checkpoint is saved); without it the state is (0, 0): epoch-level resumption, as a plain
    loader. The skipped batches are those the sampler yields for the checkpoint's epoch: the
    sampler's order must depend on (seed, epoch) only (`set_epoch`, as `DistributedSampler`),
    or on the loader's `generator` (a `RandomSampler`); the epoch is set here before skipping,
    because Lightning creates a resumed run's first iterator before it calls `set_epoch`.

    Every iterator draws its workers' base seed from `generator` (a `DataLoader` without one
    draws it from the global torch generator, which a resumed run restores only after its
    first iterator exists: the first resumed batch then saw a different dropout mask). The
    loader owns one (seeded with `torch.initial_seed()` unless given), and its state goes
    into the checkpoint, so the resumed iterator draws exactly what the killed one drew.
    """

    def __init__(
        self, *args: Any, progress: Callable[[], tuple[int, int]] | None = None, **kwargs: Any
    ):
        if kwargs.get("generator") is None:  # never draw from the global stream
            kwargs["generator"] = torch.Generator().manual_seed(torch.initial_seed())
        super().__init__(*args, **kwargs)
        self._progress = progress
        self._skip = 0
        self._epoch: int | None = None
        self._restore: tuple[Any, Any] | None = None
        self._epoch_start = self.generator.get_state()  # before the current iterator drew

    def state_dict(self) -> dict[str, Any]:
        epoch, done = self._progress() if self._progress is not None else (0, 0)
        return {
            "epoch": int(epoch),
            "batches_done": int(done),
            "generator_at_epoch_start": self._epoch_start,  # to replay this epoch
            "generator": self.generator.get_state(),  # to start the next one
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._skip = int(state.get("batches_done", 0))
        self._epoch = int(state["epoch"]) if "epoch" in state else None
        self._restore = (state.get("generator_at_epoch_start"), state.get("generator"))

    def __iter__(self):
        skip, self._skip = self._skip, 0
        epoch, self._epoch = self._epoch, None
        restore, self._restore = self._restore, None
        generator = None
        if 0 < skip < len(self):  # a checkpoint at the end of an epoch skips nothing
            if epoch is not None and hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(epoch)  # the order of the checkpoint's epoch
            generator = restore[0] if restore else None
        else:
            skip = 0
            generator = restore[1] if restore else None
        if generator is not None:
            self.generator.set_state(generator)
        self._epoch_start = self.generator.get_state()
        iterator = super().__iter__()
        for _ in range(skip):  # the batches the checkpoint had already trained on
            next(iterator)
        return iterator


def epoch_batches_done(trainer: Any) -> tuple[int, int]:
    """(current epoch, batches of it processed so far); (0, 0) without a fitting trainer."""
    try:
        done = int(trainer.fit_loop.epoch_loop.batch_progress.current.processed)
        return int(trainer.current_epoch), done
    except AttributeError:
        return 0, 0


class StepCheckpoint(ModelCheckpoint):
    """`ModelCheckpoint` for mid-epoch resume points whose saves fall on optimizer steps.

    Lightning saves `every_n_train_steps` on step boundaries, but a `train_time_interval`
    save can fall inside a gradient-accumulation window, whose gradients and token count
    (`_window_tokens`) no checkpoint holds: a run resumed from it would skip those batches'
    gradients. Such a save waits for the window's last batch here."""

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        accumulate = int(getattr(trainer, "accumulate_grad_batches", 1) or 1)
        _, done = epoch_batches_done(trainer)
        if accumulate > 1 and done % accumulate and done < trainer.num_training_batches:
            return  # mid-window: not a resume point
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


class RNGState(Callback):
    """Saves every random generator's state in each checkpoint and restores it on resume.

    The restored state is applied at `on_train_start`, after the sanity-check validation that
    Lightning runs again on resume (it draws random numbers, e.g. while loading the metric
    model), so the first resumed batch sees exactly the generators the killed run saw.
    A run that starts from scratch reseeds every generator with `seed` there (when given), so
    the training stream does not depend on what the setup drew before it (a model built or
    found in a cache, a baseline validation): two fresh runs, and a fresh run and a resumed
    one, see the same numbers at the same step."""

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed
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
        elif self.seed is not None:
            from pytorch_lightning import seed_everything

            seed_everything(self.seed, workers=True, verbose=False)

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
    """The most recently written readable `*.ckpt` in `directory` (None when there is none):
    the mid-epoch step checkpoint, `last.ckpt` or the best one, whichever holds the latest
    state. A file that does not load (cut short: Lightning writes a checkpoint to the system
    temp dir and moves it, which is a copy, not a rename, across file systems) is skipped with
    a warning, and the next newest is used. Loaded memory-mapped: tensors are not read."""
    d = Path(directory)
    if not d.is_dir():
        return None
    ckpts = [p for p in d.glob("*.ckpt") if p.is_file()]
    for path in sorted(ckpts, key=lambda p: (p.stat().st_mtime_ns, p.name), reverse=True):
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            step = int(ckpt["global_step"])
        except Exception as e:  # noqa: BLE001 - any unreadable file is skipped, and said so
            log.warning("skipping checkpoint %s: it does not load (%s)", path, e)
            continue
        log.info("newest checkpoint %s (global step %d)", path, step)
        return path
    return None


def _digest(*tensors: Any) -> str:
    """A short content hash of tensors / arrays / picklable values (for traces)."""
    import hashlib
    import pickle

    h = hashlib.blake2b(digest_size=8)
    for t in tensors:
        if isinstance(t, torch.Tensor):
            h.update(t.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(t, np.ndarray):
            h.update(np.ascontiguousarray(t).tobytes())
        else:
            h.update(pickle.dumps(t))
    return h.hexdigest()


class StepTrace(Callback):
    """Diagnosis of resume exactness: one JSON line per training batch in `path` (appended),
    written before the batch runs: epoch, global step, batch index, a hash of the batch's
    `input_ids`/`labels`, of the torch/numpy/python generator states and of the weights and
    optimizer state. Diff two runs' files (an uninterrupted one and a killed-and-resumed one)
    to find the first step where they part. `exit_at_step`: the process ends abruptly
    (`os._exit(137)`, like a SIGKILL) before the batch of that global step runs, i.e. just
    after the step checkpoint of the previous step was written. Enable from the command line:
    `+callbacks.trace._target_=densex.utils.resume.StepTrace +callbacks.trace.path=trace.jsonl`.
    """

    def __init__(self, path: str | os.PathLike, exit_at_step: int | None = None) -> None:
        self.path = Path(path)
        self.exit_at_step = exit_at_step

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        import json

        if self.exit_at_step is not None and trainer.global_step == self.exit_at_step:
            os._exit(137)
        opt_state = [
            v
            for opt in trainer.optimizers
            for s in opt.state.values()
            for v in s.values()
            if isinstance(v, torch.Tensor)
        ]
        row = {
            "epoch": trainer.current_epoch,
            "global_step": trainer.global_step,
            "batch_idx": batch_idx,
            "batch": _digest(batch["input_ids"], batch["labels"]),
            "torch_rng": _digest(torch.get_rng_state()),
            "numpy_rng": _digest(np.random.get_state()[1]),
            "python_rng": _digest(random.getstate()),
            "weights": _digest(*pl_module.state_dict().values()),
            "optimizer": _digest(*opt_state),
        }
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
