"""The checkpoints of a fine-tuning run: where they go, which one to resume from, and which
one is best by the monitored metric (read from the checkpoint file itself, ddp_spawn-safe).

Contract: `resolve_ckpt(ckpt_path, cfg)` -> the path to resume from or None (`last` | `auto`
| a path; a missing one is a `FileNotFoundError`); `resume_problem` -> why it cannot resume,
from the file system alone (preflight's check); `best_checkpoint` / `best_score` -> the
best checkpoint's path, score and loaded contents; `load_best_weights` puts them in the module.
Checkpoints are loaded with `weights_only=True`. torch and Lightning are imported by the
functions that use them, so preflight can check `ckpt_path` (`check_resume`) before either.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from densex.utils.logging import get_logger

if TYPE_CHECKING:
    import pytorch_lightning as pl

log = get_logger("densex.pipelines.train.run")  # the stage's log lines keep its name

MONITOR = "val/set_f1"


def best_checkpoint(
    trainer: Any, monitor: str = MONITOR
) -> tuple[str, float | None, dict[str, Any] | None]:
    """(path, score, loaded checkpoint) of the best checkpoint by `monitor`, from the
    `ModelCheckpoint` that monitors it (not just `trainer.checkpoint_callback`).

    The score is read from the checkpoint file itself (the callback's state saved in it):
    under `ddp_spawn` the launcher process gets back only the first checkpoint callback's
    `best_model_path`, never `best_model_score`. ("", None, None) without such a checkpoint.
    """
    import torch
    from pytorch_lightning.callbacks import ModelCheckpoint

    cbs = [c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint)]
    cb = next((c for c in cbs if c.monitor == monitor), None)
    if cb is None:
        return "", None, None

    def load(path: str) -> dict[str, Any]:
        return torch.load(path, map_location="cpu", weights_only=True)

    path = cb.best_model_path
    if not path:  # ddp_spawn: find it in the state saved with another callback's checkpoint
        for other in cbs:
            for p in {other.best_model_path, other.last_model_path} - {""}:
                if Path(p).exists():
                    state = _callback_state(load(p), cb, monitor) or {}
                    path = state.get("best_model_path") or ""
                if path:
                    break
            if path:
                break
    if not path or not Path(path).exists():
        return "", None, None
    ckpt = load(path)
    state = _callback_state(ckpt, cb, monitor) or {}
    score = state.get("best_model_score")
    if score is None:
        score = cb.best_model_score
    return path, (float(score) if score is not None else None), ckpt


def _callback_state(ckpt: dict[str, Any], cb: Any, monitor: str) -> dict[str, Any] | None:
    """The state `cb` saved in `ckpt` (by its state key, else the one monitoring `monitor`)."""
    states = ckpt.get("callbacks") or {}
    if cb.state_key in states:
        return states[cb.state_key]
    return next(
        (s for s in states.values() if isinstance(s, dict) and s.get("monitor") == monitor), None
    )


def checkpoint_dir(cfg: DictConfig) -> Path:
    """Where this run's resume checkpoints go (`callbacks.last_checkpoint.dirpath`)."""
    cb = (cfg.get("callbacks") or {}).get("last_checkpoint") or {}
    return Path(cb.get("dirpath") or Path(cfg.paths.output_dir) / "checkpoints")


def resume_problem(ckpt_path: str | None, cfg: DictConfig) -> str | None:
    """Why `ckpt_path` cannot resume, from the file system alone (no checkpoint is read, so
    preflight asks before torch is imported); None when it can or is null / `auto`."""
    if ckpt_path == "last":
        ckpt_dir = checkpoint_dir(cfg)
        if not (ckpt_dir.is_dir() and any(p.is_file() for p in ckpt_dir.glob("*.ckpt"))):
            return _nothing_to_resume(ckpt_dir)
    elif ckpt_path and ckpt_path != "auto" and not Path(ckpt_path).exists():
        return f"ckpt_path not found: {ckpt_path}"
    return None


def _nothing_to_resume(ckpt_dir: Path) -> str:
    return (
        f"ckpt_path=last: there is no checkpoint in {ckpt_dir} (nothing to resume); "
        "start fresh with ckpt_path=null, or use ckpt_path=auto to resume when there is one"
    )


def resolve_ckpt(ckpt_path: str | None, cfg: DictConfig) -> str | None:
    """`last`: the newest checkpoint of this run dir that loads (mid-epoch step checkpoints
    included), an error saying there is none otherwise; `auto`: the same, or a clean start
    when there is none (a requeued cluster job); a path must exist."""
    from densex.utils.resume import newest_checkpoint

    if not ckpt_path:
        return None
    if ckpt_path not in ("last", "auto"):
        if problem := resume_problem(ckpt_path, cfg):
            raise FileNotFoundError(problem)
        return ckpt_path
    ckpt_dir = checkpoint_dir(cfg)
    newest = newest_checkpoint(ckpt_dir)
    if newest is None:
        if ckpt_path == "auto":
            log.info("ckpt_path=auto: no checkpoint in %s, starting from scratch", ckpt_dir)
            return None
        raise FileNotFoundError(_nothing_to_resume(ckpt_dir))
    log.info("resuming from the newest checkpoint %s", newest)
    return str(newest)


def best_score(trainer: pl.Trainer, monitor: str) -> tuple[str, float, dict[str, Any] | None]:
    """(best checkpoint path, best `monitor` value, the loaded checkpoint on rank 0): from the
    checkpoint file on rank 0 (ddp_spawn-safe), the callback elsewhere, else the last value."""
    best_path, best, best_ckpt = "", None, None
    if trainer.is_global_zero:
        best_path, best, best_ckpt = best_checkpoint(trainer, monitor)
    else:
        cb = next((c for c in trainer.checkpoint_callbacks if c.monitor == monitor), None)
        best = cb.best_model_score if cb is not None else None
    if best is None:
        log.warning("no best %s checkpoint score: reporting the last validation's", monitor)
        best = trainer.callback_metrics.get(monitor)
    return best_path, (float(best) if best is not None else float("nan")), best_ckpt


def load_best_weights(module: Any, best_ckpt: dict[str, Any] | None) -> dict[str, Any]:
    """Load the best checkpoint's weights into `module`; its epoch and step for the summary."""
    if best_ckpt is None:
        return {}
    module.load_state_dict(best_ckpt["state_dict"])
    return {"best_epoch": best_ckpt["epoch"], "best_global_step": best_ckpt["global_step"]}
