"""What identifies a generation run in cache keys: the checkpoint (`model_fingerprint`: a local
directory's files, or a hub id with the commit it resolves to) and the dtype generation
actually runs in (`effective_dtype`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from densex.utils.logging import get_logger
from densex.utils.models import cpu_has_bf16, resolve_dtype

log = get_logger(__name__)

__all__ = [
    "cpu_has_bf16",
    "effective_dtype",
    "hub_commit",
    "model_fingerprint",
    "runtime_dtype",
]


def hub_commit(repo_id: str, cache_dir: str | os.PathLike | None = None) -> str | None:
    """The commit a hub id resolves to now, as `from_pretrained` will load it: the snapshot
    directory of its `config.json` (online: the hub's current main, the config fetched into
    the cache as transformers would; offline: the cached `refs/main`). None when it cannot be
    known (offline and not cached, no such repo): the model then fails to load anyway."""
    try:
        from huggingface_hub import hf_hub_download

        path = Path(hf_hub_download(repo_id, "config.json", cache_dir=cache_dir))
    except Exception as e:  # offline and uncached, unknown repo, no network
        log.warning("cannot resolve the commit of %s (%s); keyed by its id only", repo_id, e)
        return None
    return path.parent.name if path.parent.parent.name == "snapshots" else None


def model_fingerprint(model: str, cache_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """What identifies a checkpoint in cache keys: a local directory's files (name, size, mtime),
    a hub id with the commit it resolves to (`hub_commit`; None when unresolvable)."""
    p = Path(model)
    if p.is_dir():
        files = sorted(
            (f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in p.iterdir() if f.is_file()
        )
        return {"path": str(p), "files": files}
    return {"hub_id": model, "commit": hub_commit(model, cache_dir)}


def effective_dtype(name: str, trainer_args: dict[str, Any] | None = None) -> str:
    """The dtype generation runs in: `float32|bfloat16|float16`, with `auto` resolved for the
    trainer's accelerator (`trainer_args`: the `trainer` group's plain values; `runtime_dtype`:
    bfloat16 on a bf16 CUDA GPU and on a CPU with native bf16 matmuls, float32 elsewhere)."""
    accel = (trainer_args or {}).get("accelerator") or "auto"
    device = "cuda" if str(accel).lower() in ("auto", "gpu", "cuda") else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        device = "cpu"
    return str(runtime_dtype(name, device)).removeprefix("torch.")


def runtime_dtype(name: Any, device: Any = None) -> torch.dtype:
    """`utils.models.resolve_dtype`, except that `auto` on a CPU is bfloat16 where the CPU
    multiplies bf16 natively (`cpu_has_bf16`: AMX or AVX512-BF16) and float32 elsewhere (on a
    CPU without them bf16 matmuls are emulated: ~4x slower than fp32 on an AVX512 Xeon)."""
    if str(name).lower() == "auto" and _on_cpu(device) and cpu_has_bf16():
        return torch.bfloat16
    return resolve_dtype(name, device)


def _on_cpu(device: Any) -> bool:
    if device is None:
        return not torch.cuda.is_available()
    return torch.device(device).type == "cpu"
