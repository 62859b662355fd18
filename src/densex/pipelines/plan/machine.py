"""The machine and encoder facts `index.py stage=plan` budgets with, found without any network
access or model loading.

Contract: `retriever_dim` (a retriever's embedding dimension and where it came from),
`measured_units_per_second` (the throughput recorded in this cache's embeddings manifests),
`measured_passages_per_second` (the proposition stage's, from its manifests or the speed
benchmark's record),
`machine` (RAM, free disk, GPUs, cores and queries of the machine to plan for: `plan.*` keys,
defaulting to this one) and `cpu_flops` (a ~0.3 s float32 GEMM probe).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from densex.pipelines.plan.sizes import GB
from densex.utils.config import plain_data
from densex.utils.models import resolve_model

# Output dimension of the paper's six retrievers and the packaged MiniLM (model cards /
# config.json: BERT-base and T5-base hidden size, GTR's Dense projection 768 -> 768)
KNOWN_DIMS = {
    "simcse": 768,
    "contriever": 768,
    "dpr": 768,
    "ance": 768,
    "tasb": 768,
    "gtr": 768,
    "minilm": 384,
}
REFERENCE_GPU_MEM_GB = 80.0  # A100/H100 80 GB: GPU memory assumed when none is given


def retriever_dim(retriever_cfg: Mapping[str, Any]) -> tuple[int | None, str]:
    """(embedding dimension, where it came from) without any network access: `dim` (hash),
    a local model's files (sentence-transformers Dense module, else config.json), or
    `KNOWN_DIMS`; (None, "sparse") for a sparse retriever."""
    r = dict(plain_data(retriever_cfg) or {})
    if str(r.get("type", "dense")) == "sparse":
        return None, "sparse"
    if r.get("dim"):
        return int(r["dim"]), "retriever.dim"
    model = r.get("doc_model") or r.get("query_model")
    if model:
        try:
            local = Path(resolve_model(str(model)))
        except (FileNotFoundError, ImportError):
            local = None
        if local is not None and local.is_dir():
            dim = _local_model_dim(local)
            if dim:
                return dim, f"{local.name} config"
    name = str(r.get("name", ""))
    if name in KNOWN_DIMS:
        return KNOWN_DIMS[name], "known dim of the paper retrievers"
    return 768, "assumed (BERT-base)"


def _local_model_dim(path: Path) -> int | None:
    """Output dimension from a model directory's files: the last sentence-transformers Dense
    module's out_features, else the transformer's hidden size."""
    modules = path / "modules.json"
    if modules.is_file():
        try:
            entries = json.loads(modules.read_text())
        except json.JSONDecodeError:
            entries = []
        for entry in reversed(entries):
            if str(entry.get("type", "")).endswith("Dense"):
                cfg = path / entry.get("path", "") / "config.json"
                if cfg.is_file():
                    return int(json.loads(cfg.read_text())["out_features"])
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        return None
    cfg = json.loads(cfg_path.read_text())
    if int(cfg.get("projection_dim") or 0) > 0:  # DPR with a projection
        return int(cfg["projection_dim"])
    for key in ("hidden_size", "d_model", "dim"):
        if cfg.get(key):
            return int(cfg[key])
    return None


def measured_units_per_second(cache_dir: str | os.PathLike, retriever: str) -> dict | None:
    """The embeddings manifest of `retriever` in the cache that encoded the most units this
    run: `{units_per_second, count, processes, path}`; None when there is none."""
    best = None
    for manifest in Path(cache_dir, "embeddings", retriever).glob("*/manifest.json"):
        try:
            m = json.loads(manifest.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        ups, encoded = m.get("units_per_second"), m.get("encoded_this_run") or 0
        if ups and (best is None or encoded > best["encoded"]):
            best = {
                "units_per_second": float(ups),
                "encoded": int(encoded),
                "processes": int(m.get("processes") or 1),
                "path": str(manifest.parent),
            }
    return best


SPEED_RECORD = ("benchmarks", "propositionizer_speed.json")  # benchmarks/propositionizer_speed.py


def measured_passages_per_second(cache_dir: str | os.PathLike) -> dict | None:
    """The proposition stage's rate on this machine: from this cache's generated propositions
    manifests (the passages a model run generated / its `generation_seconds`; the run that
    generated the most), else from the speed benchmark's record in the cache (its fastest
    student path): `{passages_per_second, passages, source}`; None when neither exists."""
    best = None
    for manifest in Path(cache_dir, "propositions").glob("*/*/manifest.json"):
        try:
            m = json.loads(manifest.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        shards, seconds = m.get("shards") or {}, m.get("generation_seconds")
        if not seconds or not m.get("passages") or not shards.get("generated"):
            continue
        n = m["passages"] * shards["generated"] / max(1, shards.get("total") or 1)
        if best is None or n > best["passages"]:
            decoding = (m.get("settings") or {}).get("decoding", "?")
            source = f"{manifest.parent} ({decoding})"
            best = {"passages_per_second": n / seconds, "passages": n, "source": source}
    if best is not None:
        return best
    try:
        record = json.loads(Path(cache_dir, *SPEED_RECORD).read_text())
        fastest = record["best"]
    except (OSError, json.JSONDecodeError, KeyError):
        return None
    n = next(iter(record.get("student", {}).values()), {}).get("n", 0)
    source = f"{Path(cache_dir, *SPEED_RECORD)} (benchmark: {fastest['path']})"
    return {
        "passages_per_second": float(fastest["passages_per_s"]),
        "passages": n,
        "source": source,
    }


def _total_ram_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GB
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 16.0


def machine(plan_cfg: Mapping[str, Any], cache_dir: str | os.PathLike) -> dict[str, Any]:
    """The machine to plan for: `plan.*` keys, defaulting to this one (RAM from sysconf, free
    disk where `paths.cache_dir` lives, GPUs and their memory from torch.cuda)."""
    p = dict(plain_data(plan_cfg) or {})
    gpus, gpu_mem = p.get("gpus"), p.get("gpu_mem_gb")
    if gpus is None or (gpus and gpu_mem is None):
        if gpus is None:
            gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus and gpu_mem is None and torch.cuda.is_available():
            gpu_mem = torch.cuda.get_device_properties(0).total_memory / GB
    where = Path(cache_dir)
    while not where.exists() and where != where.parent:
        where = where.parent
    return {
        "ram_gb": float(p.get("ram_gb") or _total_ram_gb()),
        "disk_gb": float(p.get("disk_gb") or shutil.disk_usage(where).free / GB),
        "gpus": int(gpus or 0),
        "gpu_mem_gb": float(gpu_mem or REFERENCE_GPU_MEM_GB),
        "cores": int(p.get("cores") or os.cpu_count() or 1),
        "queries": int(p.get("queries") or 3610),
    }


def cpu_flops(seconds: float = 0.3) -> float:
    """Measured float32 GEMM FLOP/s of this process (numpy BLAS, a ~0.3 s probe)."""
    a = np.random.default_rng(0).standard_normal((1024, 768), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((768, 2048), dtype=np.float32)
    a @ b  # warm-up
    n, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        a @ b
        n += 1
    return 2.0 * 1024 * 768 * 2048 * n / elapsed
