"""Propositionize a passages file: read and check the passages, then hand them to a backend,
the seq2seq model (`model_backend.py`) or the LLM teacher (`teacher_backend.py`); both write
through `output.py` and neither imports the other.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from densex.corpus.readers import Skips, read_passages
from densex.propositionizer.model_backend import generate_with_model
from densex.propositionizer.resolve import FALLBACK_MODES
from densex.propositionizer.settings import ModelSettings, PropositionizerSettings, TeacherSettings
from densex.propositionizer.teacher_backend import generate_with_teacher
from densex.utils.logging import get_logger

log = get_logger(__name__)

__all__ = ["generate_propositions"]


def generate_propositions(
    passages_path: str | os.PathLike,
    opts: PropositionizerSettings,
    out_path: str | os.PathLike,
    trainer_args: dict[str, Any] | None = None,
) -> Path:
    """Write `{"id", "propositions"}` for every passage of `passages_path` to `out_path`.

    `opts.type` picks the backend: `model` (`ModelSettings`: any seq2seq checkpoint, a hub id
    or a `save_pretrained` directory) or `teacher` (`TeacherSettings`: an OpenAI-compatible
    chat API, `teacher.py`). `trainer_args` (the `trainer` group's plain values) set
    devices/strategy for `model`.
    """
    passages_path, out_path = Path(passages_path), Path(out_path)
    if opts.fallback not in FALLBACK_MODES:
        raise ValueError(
            f"propositionizer.fallback must be one of {FALLBACK_MODES}, got {opts.fallback!r}"
        )
    # unique non-empty string ids, non-empty text, errors located by file:line:field;
    # `on_error: skip` drops such rows, counted in the log and the manifest's `skipped`
    skips = Skips(opts.on_error)
    passages = read_passages(passages_path, skips)
    if skips.total:
        log.warning(
            "skipped %d bad passages of %s: %s", skips.total, passages_path, skips.summary()
        )
    if opts.type == "model" and isinstance(opts, ModelSettings):
        return generate_with_model(
            passages, passages_path, opts, out_path, trainer_args, skips.summary()
        )
    if opts.type == "teacher" and isinstance(opts, TeacherSettings):
        return generate_with_teacher(
            passages, passages_path, opts, out_path, skipped=skips.summary()
        )
    raise ValueError(
        f"propositionizer.type={opts.type!r} cannot generate; expected 'model' or 'teacher' "
        "('file' reads an existing propositions file and needs no generation)"
    )
