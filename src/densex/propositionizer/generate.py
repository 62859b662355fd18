"""Propositionize a passages file with a seq2seq checkpoint (Lightning `Trainer.predict`
over resumable shards) or an LLM teacher (`teacher.py`); both write through `output.py`.
Shards, dtype and fingerprint rules: docs/architecture.md, "Design notes: generation".
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import BasePredictionWriter
from torch.utils.data import DataLoader

from densex.corpus.readers import Skips, read_passages
from densex.propositionizer.output import (
    NO_SKIPS,
    manifest_path,
    passage_source,
    write_propositions,
)
from densex.propositionizer.parse import FALLBACK_MODES, ParseLimits
from densex.propositionizer.teacher import generate_with_teacher
from densex.utils.cache import content_key, hash_file
from densex.utils.config import from_config
from densex.utils.generation import generate_sorted
from densex.utils.integrity import remove_orphans
from densex.utils.io import DataError, read_jsonl, write_jsonl
from densex.utils.logging import get_logger
from densex.utils.models import resolve_dtype, resolve_model
from densex.utils.shards import pending as shards_pending
from densex.utils.shards import plan_shards, rank_share
from densex.utils.trainer import predict_trainer

log = get_logger(__name__)

__all__ = [
    "ModelSettings",
    "ParseLimits",
    "PropositionGenerator",
    "PropositionShardWriter",
    "PropositionizerSettings",
    "effective_dtype",
    "generate_propositions",
    "manifest_path",
    "model_fingerprint",
    "passage_source",
    "read_passages",
    "write_propositions",
]

SHARD_NAME = "shard-{:05d}.jsonl"


class PropositionGenerator(pl.LightningModule):
    """Greedy seq2seq generation in `predict_step`; one predict batch = one shard of passages.

    The checkpoint is loaded in `setup` (in every process, after ddp_spawn pickles the module),
    so the module itself is cheap to pickle. `shards` is a list of
    `{"shard": int, "ids": [...], "sources": [...]}`; each rank takes every world_size-th one.
    """

    def __init__(
        self,
        model_name_or_path: str,
        shards: Sequence[Mapping[str, Any]] = (),
        batch_size: int = 8,
        max_source_length: int = 512,
        max_new_tokens: int = 512,
        num_beams: int = 1,
        dtype: str = "auto",
    ):
        super().__init__()
        self.model_name_or_path = model_name_or_path
        self.shards = list(shards)
        self.batch_size = batch_size
        self.max_source_length = max_source_length
        self.max_new_tokens = max_new_tokens
        self.num_beams = num_beams
        self.dtype_name = dtype
        self.model = None
        self.tokenizer = None

    def setup(self, stage: str | None = None) -> None:
        if self.model is not None:
            return
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_name_or_path)
        self.tokenizer.model_max_length = self.max_source_length
        # loaded directly in an explicit dtype; `auto` waits for the device (on_predict_start)
        dtype = torch.float32 if self.dtype_name == "auto" else resolve_dtype(self.dtype_name)
        self.model = AutoModelForSeq2SeqLM.from_pretrained(self.model_name_or_path, dtype=dtype)
        self.model.eval()

    def on_predict_start(self) -> None:
        self.model.to(resolve_dtype(self.dtype_name, self.device))

    def predict_dataloader(self) -> DataLoader:
        rank, world = self.trainer.global_rank, self.trainer.world_size
        mine = rank_share(self.shards, rank, world)
        return DataLoader(mine, batch_size=1, shuffle=False, collate_fn=_only)

    def generate(self, sources: Sequence[str]) -> tuple[list[str], list[bool]]:
        """Generate for `sources` in length-sorted batches; return texts and, per text, whether
        it hit `max_new_tokens` without an end-of-sequence token (likely cut off)."""
        if self.model is None:
            self.setup()
        return generate_sorted(
            self.model,
            self.tokenizer,
            sources,
            self.batch_size,
            self.max_new_tokens,
            self.num_beams,
        )

    def predict_step(self, batch: Mapping[str, Any], batch_idx: int) -> dict[str, Any]:
        texts, cut = self.generate(batch["sources"])
        return {"shard": batch["shard"], "ids": batch["ids"], "raw": texts, "cut": cut}


def _only(batch: list[Any]) -> Any:
    """Collate for one-shard batches (a module-level function, so ddp_spawn can pickle it)."""
    return batch[0]


class PropositionShardWriter(BasePredictionWriter):
    """Writes each predicted shard atomically as `shard-XXXXX.jsonl` of `{"id", "raw", "cut"}`."""

    def __init__(self, shard_dir: str | os.PathLike):
        super().__init__(write_interval="batch")
        self.shard_dir = Path(shard_dir)

    def write_on_batch_end(
        self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx=0
    ) -> None:
        rows = (
            {"id": i, "raw": r, "cut": c}
            for i, r, c in zip(prediction["ids"], prediction["raw"], prediction["cut"])
        )
        write_jsonl(self.shard_dir / SHARD_NAME.format(prediction["shard"]), rows)


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


@dataclass(frozen=True)
class PropositionizerSettings:
    """What every `conf/propositionizer` backend shares (defaults as in its YAML files)."""

    type: str = "model"
    fallback: str = "sentences"
    on_error: str = "raise"
    spacy_model: str = "en_core_web_lg"


@dataclass(frozen=True)
class ModelSettings(PropositionizerSettings):
    """The seq2seq backend's options (`conf/propositionizer/model.yaml`)."""

    model: str = ""
    dtype: str = "auto"
    batch_size: int = 8
    max_source_length: int = 512
    max_new_tokens: int = 512
    num_beams: int = 1
    shard_size: int = 256


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


def effective_dtype(name: str, trainer_cfg: Mapping[str, Any] | Any = None) -> str:
    """The dtype generation runs in: `float32|bfloat16|float16`, with `auto` resolved for the
    trainer's accelerator (bfloat16 on a bf16 CUDA GPU, float32 on CPU and elsewhere)."""
    accel = (trainer_cfg.get("accelerator") if trainer_cfg is not None else None) or "auto"
    device = "cuda" if str(accel).lower() in ("auto", "gpu", "cuda") else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        device = "cpu"
    return str(resolve_dtype(name, device)).removeprefix("torch.")


def _read_shard(path: Path, ids: Sequence[str]) -> list[dict[str, Any]] | None:
    """The rows of a complete shard for exactly `ids`, or None (missing or stale)."""
    if not path.exists():
        return None
    try:
        rows = list(read_jsonl(path, required=("id", "raw")))
    except DataError as e:
        log.warning("ignoring unreadable shard %s: %s", path, e)
        return None
    if [r["id"] for r in rows] != list(ids):
        log.warning("ignoring shard %s: its ids do not match the passages", path)
        return None
    return rows


def _generation_settings(opts: ModelSettings, trainer_cfg: Any) -> dict[str, Any]:
    """The PropositionGenerator keyword arguments, with the dtype actually used (never the
    trainer's precision: see docs/architecture.md, "Propositionizer dtype")."""
    return {
        "batch_size": opts.batch_size,
        "max_source_length": opts.max_source_length,
        "max_new_tokens": opts.max_new_tokens,
        "num_beams": opts.num_beams,
        "dtype": effective_dtype(opts.dtype, trainer_cfg),
    }


def _plan_shards(passages: Sequence[Mapping[str, Any]], shard_size: int) -> list[dict[str, Any]]:
    """Consecutive shards of `shard_size` passages: `{"shard", "ids", "sources"}`."""
    return [
        {
            "shard": k,
            "ids": [p["id"] for p in passages[s:e]],
            "sources": [passage_source(p) for p in passages[s:e]],
        }
        for k, (s, e) in enumerate(plan_shards(len(passages), shard_size))
    ]


def _run_pending(
    model: str,
    pending: list[dict[str, Any]],
    settings: Mapping[str, Any],
    shard_dir: Path,
    trainer_cfg: Any,
) -> pl.Trainer:
    """Generate the `pending` shards with `Trainer.predict`; the trainer, after every rank's
    shards are on disk (under ddp every rank runs this; rank 0 merges)."""
    module = PropositionGenerator(model, pending, **settings)
    # 32-true: the weights' own dtype decides; the trainer's `precision: auto` would
    # otherwise wrap predict_step in bf16 autocast behind the manifest's back
    trainer = predict_trainer(
        trainer_cfg, callbacks=[PropositionShardWriter(shard_dir)], precision="32-true"
    )
    trainer.predict(module, return_predictions=False)
    trainer.strategy.barrier("propositions-shards")  # every rank's shards are on disk
    return trainer


def _collect_shards(shards: Sequence[Mapping[str, Any]], shard_dir: Path) -> tuple[list[str], int]:
    """Every passage's raw output in passage order, and how many hit `max_new_tokens`."""
    raws: list[str] = []
    cut = 0
    for s in shards:
        rows = _read_shard(shard_dir / SHARD_NAME.format(s["shard"]), s["ids"])
        if rows is None:
            raise RuntimeError(f"shard {s['shard']} missing after generation in {shard_dir}")
        raws += [r["raw"] for r in rows]
        cut += sum(bool(r.get("cut")) for r in rows)
    return raws, cut


def _generate_with_model(
    passages: list[dict[str, Any]],
    passages_path: Path,
    cfg: Mapping[str, Any] | Any,
    out_path: Path,
    trainer_cfg: Any,
    skipped: Mapping[str, Any] | None = None,
) -> Path:
    """The model backend: resumable shards keyed by model, passages and settings, then merge."""
    opts = from_config(ModelSettings, cfg)
    model = resolve_model(opts.model)
    settings = _generation_settings(opts, trainer_cfg)
    if opts.shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {opts.shard_size}")
    passages_sha = hash_file(passages_path)
    # batch_size and dtype do not change greedy outputs in principle, but bf16 vs fp32 can flip
    # near-ties; keep dtype in the key, leave batch_size out so a resume may change it.
    fingerprint = model_fingerprint(model)
    key = content_key(
        model=fingerprint,
        passages=passages_sha,
        shard_size=opts.shard_size,
        **{k: v for k, v in settings.items() if k != "batch_size"},
    )
    shard_dir = out_path.parent / "shards" / key
    remove_orphans(shard_dir)  # temp files of a killed earlier run
    shards = _plan_shards(passages, opts.shard_size)
    pending = shards_pending(
        shards,
        lambda s: _read_shard(shard_dir / SHARD_NAME.format(s["shard"]), s["ids"]) is not None,
    )
    log.info(
        "propositionizer %s: %d passages in %d shards, %d to generate (%s)",
        *(model, len(passages), len(shards), len(pending), shard_dir),
    )
    t0 = time.perf_counter()
    trainer = _run_pending(model, pending, settings, shard_dir, trainer_cfg) if pending else None
    if trainer is not None and not trainer.is_global_zero:  # ddp (not spawn): rank 0 merges
        trainer.strategy.barrier("propositions-merged")  # ... and the others wait for it
        return out_path
    seconds = time.perf_counter() - t0
    raws, cut = _collect_shards(shards, shard_dir)
    write_propositions(
        passages,
        raws,
        out_path,
        fallback=opts.fallback,
        spacy_model=opts.spacy_model,
        limits=ParseLimits.from_cfg(cfg),
        type="model",
        model=model,
        model_commit=fingerprint.get("commit"),
        settings={
            **settings,
            "dtype_requested": opts.dtype,
            "shard_size": opts.shard_size,
            "decoding": "greedy" if opts.num_beams == 1 else "beam",
        },
        passages_file=str(passages_path),
        passages_sha256=passages_sha,
        shards={
            "dir": str(shard_dir),
            "total": len(shards),
            "generated": len(pending),
            "reused": len(shards) - len(pending),
        },
        hit_max_new_tokens=cut,
        skipped=dict(skipped or NO_SKIPS),
        generation_seconds=round(seconds, 3),
    )
    if trainer is not None:
        trainer.strategy.barrier("propositions-merged")  # the other ranks may read it now
    return out_path


def generate_propositions(
    passages_path: str | os.PathLike,
    propositionizer_cfg: Mapping[str, Any] | Any,
    out_path: str | os.PathLike,
    trainer_cfg: Mapping[str, Any] | Any = None,
) -> Path:
    """Write `{"id", "propositions"}` for every passage of `passages_path` to `out_path`.

    `propositionizer_cfg.type` picks the backend: `model` (any seq2seq checkpoint: a hub id, a
    `save_pretrained` directory) or `teacher` (an OpenAI-compatible chat API, `teacher.py`).
    `trainer_cfg` (the project's `trainer` config) sets devices/strategy for `model`.
    """
    passages_path, out_path = Path(passages_path), Path(out_path)
    opts = from_config(PropositionizerSettings, propositionizer_cfg)
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
    if opts.type == "model":
        return _generate_with_model(
            passages, passages_path, propositionizer_cfg, out_path, trainer_cfg, skips.summary()
        )
    if opts.type == "teacher":
        return generate_with_teacher(
            passages, passages_path, propositionizer_cfg, out_path, skipped=skips.summary()
        )
    raise ValueError(
        f"propositionizer.type={opts.type!r} cannot generate; expected 'model' or 'teacher' "
        "('file' reads an existing propositions file and needs no generation)"
    )
