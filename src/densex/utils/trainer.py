"""The one place a predict-only Lightning `Trainer` is built (encoding and generation share it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks.progress import ProgressBar

from densex.utils.logging import get_logger
from densex.utils.models import resolve_precision
from densex.utils.progress import is_tty
from densex.utils.progress_lightning import LogProgress

# What predict needs whatever the config says: no logger, no checkpoints, no model summary, and
# no distributed sampler (encoding and generation split whole shards across ranks themselves).
PREDICT_OVERRIDES: dict[str, Any] = {
    "logger": False,
    "enable_checkpointing": False,
    "enable_model_summary": False,
    "use_distributed_sampler": False,
}


class CloseSpawnedProcessGroup(pl.Callback):
    """Destroy the process group when a spawned (`ddp_spawn`) worker finishes; `strategy=ddp`
    processes keep theirs. Why: docs/architecture.md, "Design notes: spawned workers"."""

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        import torch.distributed as dist

        spawned = getattr(trainer.strategy, "_start_method", "popen") != "popen"
        if spawned and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


def hydra_multirun() -> bool:
    """Whether this process runs one job of a Hydra multirun (`-m`)."""
    try:
        # config-import: Hydra's runtime state (is this a multirun job?), not the config tree
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode  # config-import: as above
    except ImportError:  # pragma: no cover - hydra is a dependency
        return False
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def launched_externally() -> bool:
    """Whether the ranks were started by a launcher (srun under SLURM, torchrun): Lightning's
    `ddp` then uses those processes and starts none itself."""
    from lightning_fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

    return SLURMEnvironment.detect() or TorchElasticEnvironment.detect()


def _processes(devices: Any, num_nodes: Any) -> int | None:
    """Processes a (devices, num_nodes) setting asks for; None when it is not known up front
    (`auto`, -1)."""
    if isinstance(devices, (list, tuple)):
        per_node: int | None = len(devices)
    elif str(devices).strip().lstrip("-").isdigit():
        per_node = int(devices) if int(devices) >= 0 else None
    elif isinstance(devices, str) and "," in devices:
        per_node = len([d for d in devices.split(",") if d.strip()])
    else:
        per_node = None
    nodes = int(num_nodes or 1)
    return None if per_node is None else per_node * nodes


def multirun_safe_strategy(strategy: Any, devices: Any = 1, num_nodes: Any = 1) -> Any:
    """`strategy`, except a plain `ddp` of several processes inside a Hydra multirun that no
    external launcher started, which becomes `ddp_spawn` (with a warning).

    Lightning's `ddp` starts ranks 1..N-1 by re-running the script with `sys.argv`; inside
    `python evaluate.py -m a=1,2 ...` that argv is the whole sweep, so every extra rank would
    run the sweep again (Lightning 2.6 `_hydra_subprocess_cmd` keeps `-m` and the sweep).
    `ddp_spawn` starts workers without re-running the script. Under SLURM (submitit, one task
    per device) and torchrun, the processes already exist and `ddp` is kept.
    """
    if str(strategy) != "ddp":
        return strategy
    n = _processes(devices, num_nodes)
    if (n is not None and n <= 1) or not hydra_multirun() or launched_externally():
        return strategy

    get_logger(__name__).warning(
        "trainer.strategy=ddp inside a Hydra multirun re-runs the whole sweep in every rank;"
        " using ddp_spawn (or launch with hydra/launcher=slurm, one task per device)"
    )
    return "ddp_spawn"


def trainer_kwargs(
    trainer_args: dict[str, Any] | None,
    root_dir: str | Path | None = None,
    precision: str | int | None = None,
) -> dict[str, Any]:
    """The keyword arguments (with `_target_` when the trainer group has one) `predict_trainer`
    uses. `trainer_args` are the `trainer` group's plain values (the entry pipelines convert
    the node once: `utils.config.plain_settings(cfg.trainer, optional=("default_root_dir",))`),
    or None (one device, accelerator auto); `root_dir` and `precision` win over them."""
    if trainer_args is None:
        cfg: dict[str, Any] = {"accelerator": "auto", "devices": 1}
    else:
        cfg = {"accelerator": "auto"}
        skip = {"default_root_dir"} if root_dir is not None else set()
        if precision is not None:
            skip.add("precision")
        cfg.update({k: v for k, v in trainer_args.items() if k not in skip})
    if root_dir is not None:
        cfg["default_root_dir"] = str(root_dir)
    if precision is not None:
        cfg["precision"] = precision
    if "precision" in cfg:
        cfg["precision"] = resolve_precision(cfg["precision"])
    cfg.pop("callbacks", None)
    cfg.update(PREDICT_OVERRIDES)
    if "strategy" in cfg:
        cfg["strategy"] = multirun_safe_strategy(
            cfg["strategy"], cfg.get("devices", 1), cfg.get("num_nodes", 1)
        )
    return cfg


def predict_trainer(
    trainer_args: dict[str, Any] | None,
    root_dir: str | Path | None = None,
    callbacks: Sequence[Any] = (),
    precision: str | int | None = None,
) -> pl.Trainer:
    """A predict-only `pl.Trainer` from the `trainer` group's plain values (its `_target_`
    honoured, see `trainer_kwargs`) or None (one device, accelerator auto). `precision` (e.g. a retriever's) overrides the config's;
    either goes through `resolve_precision` (`auto` = bf16-mixed on a bf16 GPU, else 32-true)."""
    cfg = trainer_kwargs(trainer_args, root_dir, precision)
    target = cfg.pop("_target_", None)
    cfg.pop("_convert_", None)
    cfg.pop("_recursive_", None)
    callbacks = [*callbacks, CloseSpawnedProcessGroup()]
    if cfg.get("enable_progress_bar", True) and not is_tty():
        # no terminal: Lightning's bar would write nothing useful (or escapes) into logs
        cfg["enable_progress_bar"] = False
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)] + [LogProgress()]
    if target is None or target == "pytorch_lightning.Trainer":
        return pl.Trainer(**cfg, callbacks=callbacks)
    # config-import: the trainer group's `_target_` (a Trainer subclass) built as Hydra would
    import hydra.utils

    return hydra.utils.instantiate(
        {"_target_": target, **cfg}, callbacks=callbacks, _convert_="all"
    )
