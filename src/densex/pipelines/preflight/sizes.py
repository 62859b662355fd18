"""The estimated size of a job's outputs, and the free space where they go.

Contract: `estimate_cell_bytes(cfg, n_questions)` (one evaluate cell's run-dir files) and
`estimate_train_bytes(cfg, models)` (checkpoints + export) are estimates in bytes from the
config and the inputs' sizes, nothing written; `free_bytes(path)` and `warn_space(need, where)`
compare them with the file system (a warning, never an error).
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from huggingface_hub import try_to_load_from_cache
from omegaconf import DictConfig

from densex.utils.io import numbered_jsonl
from densex.utils.logging import get_logger
from densex.utils.models import resolve_model

log = get_logger("densex.pipelines.preflight.run")  # the preflight's log lines keep its name

# bytes per retrieved passage per retrieval file (DPR and pyserini layouts), measured on
# squad-open with MiniLM (ids like `Super_Bowl_50#12`); text adds the passage itself
CTX_BYTES = {"plain": 62, "gzip": 9}
TEXT_GZIP_RATIO = 0.42


def _avg_passage_bytes(cfg: DictConfig, sample: int = 500) -> float:
    path = cfg.corpus.get("passages")
    if not path or not Path(str(path)).exists():
        return 600.0
    sizes = []
    # the located byte reader; a bad line is left out of this estimate (the stage reports it)
    rows = numbered_jsonl(str(path), on_error=lambda error: None)
    for _, row in itertools.islice(rows, sample):
        sizes.append(len(str(row.get("text", ""))) + len(str(row.get("title", ""))) + 20)
    return sum(sizes) / len(sizes) if sizes else 600.0


def estimate_cell_bytes(cfg: DictConfig, n_questions: int) -> int:
    """Estimated run-dir bytes of one evaluate cell: the two retrieval files (top max(topk)
    passages per question), the curves, reader predictions."""
    k = max(int(x) for x in cfg.topk)
    with_text = bool(cfg.get("retrieval_text", False))
    gz = with_text or bool(cfg.get("retrieval_gzip", True))
    per_ctx = CTX_BYTES["gzip" if gz else "plain"]
    if with_text:
        per_ctx += _avg_passage_bytes(cfg) * (TEXT_GZIP_RATIO if gz else 1.0)
    retrieval = 2 * n_questions * (k * per_ctx + 120)
    curves = 12 * k + 16 * int(cfg.get("recall_curve_max_words", 500)) + 50_000
    reader = cfg.get("reader")
    predictions = 250 * n_questions if isinstance(reader, DictConfig) and "model" in reader else 0
    return int(retrieval + curves + predictions)


def estimate_train_bytes(cfg: DictConfig, models: Mapping[str, str]) -> int:
    """Two checkpoints (best + last: weights + AdamW's two moments) and the exported model."""
    weights = _weights_bytes(str(cfg.model.get("name_or_path")))
    return int(2 * 3 * weights + weights)


def _weights_bytes(name: str) -> int:
    """Size of a model's weight files (local dir or HF cache); 1 MB for `tiny`."""
    if name == "tiny":
        return 1 << 20

    try:
        path = Path(resolve_model(name))
    except (FileNotFoundError, ImportError):
        return 0
    if not path.exists():
        try:
            for fname in ("model.safetensors", "pytorch_model.bin"):
                hit = try_to_load_from_cache(name, fname)
                if isinstance(hit, str):
                    return Path(hit).stat().st_size
        except Exception:  # noqa: BLE001 - size unknown
            return 0
        return 0
    files = [*path.glob("*.safetensors"), *path.glob("*.bin")]
    return sum(f.stat().st_size for f in files)


def human_bytes(n: float) -> str:
    """`n` bytes as decimal B / KB / MB / GB / TB with one decimal (bytes: none)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} TB"  # pragma: no cover


def free_bytes(path: str | os.PathLike) -> int:
    """Free bytes on the file system that holds `path` (its nearest existing parent)."""
    p = Path(path).resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def warn_space(need: int, where: Path) -> None:
    """Log a warning when `need` bytes exceed the free space in `where`."""
    free = free_bytes(where)
    if need > free:
        log.warning(
            "estimated outputs (%s) exceed the free space in %s (%s)",
            human_bytes(need),
            where,
            human_bytes(free),
        )
