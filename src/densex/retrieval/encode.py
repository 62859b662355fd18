"""Encode a units file into sharded, resumable embeddings with Lightning `Trainer.predict`.

Rows are cut into shards of fixed global row ranges (`emb-<start>-<end>.npy` + `ids-...json`),
so the files do not depend on how many processes wrote them. Each shard is written atomically
once all its rows are encoded; a rerun after a crash skips complete shards. With
`trainer.devices=N` (ddp_spawn on CPU, ddp on GPUs) rank r encodes pending shards r, r+N, ...
so no unit is lost or duplicated. Within a shard rows are fed longest-first (less padding), and
written back in file order.

The stored directory is opened by `retrieval.embedding_store`; what each process encodes is
`retrieval.encode_data`, and the Lightning module, shard writer and progress bar are
`retrieval.encode_lightning`; under late chunking (`retriever.late_chunking`) a shard's units
are pooled from their passages' token states (`retrieval.late`, `retrieval.late_data`), into
the same shards. This module binds a directory to one encoding, plans and resumes
its shards, runs `Trainer.predict` and writes the manifest.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from densex.corpus.units import unit_tables
from densex.corpus.units_digest import units_digest
from densex.retrieval.embedding_store import EmbeddingStore, open_embeddings
from densex.retrieval.encode_data import ShardTexts, shard_claim, shard_written
from densex.retrieval.encoders import load_encoder
from densex.retrieval.late_data import LateShardTexts
from densex.retrieval.spec import RetrieverSpec
from densex.utils.integrity import file_record, remove_orphans
from densex.utils.io import DataError, read_json, write_json, write_manifest
from densex.utils.locks import clear_claims, locked, share_pending
from densex.utils.logging import get_logger
from densex.utils.shards import plan_shards, shard_stem

if TYPE_CHECKING:
    import pytorch_lightning as pl

log = get_logger(__name__)

__all__ = ["encode_units_to_dir"]


def _complete_shards(
    out: Path, plan: Sequence[tuple[int, int]], dtype: str
) -> set[tuple[int, int]]:
    """Shards whose .npy and ids files both exist with the planned number of rows."""
    done = set()
    for start, end in plan:
        stem = shard_stem(start, end)
        emb, ids = out / f"emb-{stem}.npy", out / f"ids-{stem}.json"
        if not (emb.exists() and ids.exists()):
            continue
        try:
            arr = np.load(emb, mmap_mode="r")
            ok = arr.shape[0] == end - start and arr.dtype == np.dtype(dtype)
            ok = ok and len(read_json(ids)) == end - start
        except (ValueError, OSError, DataError):
            ok = False
        if ok:
            done.add((start, end))
        else:
            log.warning("shard %s is damaged; it will be re-encoded", emb)
    return done


def _truncation_summary(out: Path, plan: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """Units the tokenizer truncated, over every shard (`trunc-<stem>.json`, written when the
    shard was planned): a count and the first ids. Shards encoded by an older version have no
    such file: they are listed as unknown."""
    count, examples, unknown = 0, [], 0
    for s, e in plan:
        path = out / f"trunc-{shard_stem(s, e)}.json"
        if not path.exists():
            unknown += 1
            continue
        ids = read_json(path)
        count += len(ids)
        examples += ids[: max(0, 20 - len(examples))]
    return {"count": count, "examples": examples, "shards_unknown": unknown}


def encode_units_to_dir(
    units_path: str | Path,
    spec: RetrieverSpec,
    out_dir: str | Path,
    trainer_args: dict[str, Any] | None = None,
    shard_size: int = 50_000,
    dtype: str | None = None,
) -> EmbeddingStore:
    """Encode every unit of `units_path` with the retriever's document encoder into `out_dir`.

    Resumes from complete shards; returns the opened `EmbeddingStore`. The directory is bound to
    one (units file, retriever, shard size, dtype): reusing it for another is a `DataError`.
    Encoding runs in `spec.precision` (default 32-true), whatever `trainer_args` say;
    `trainer_args` are the `trainer` group's plain values (`utils.trainer.predict_trainer`).
    """
    units_path, out = Path(units_path), Path(out_dir)
    if not units_path.exists():
        raise DataError(units_path, None, None, "file not found")
    job = {
        "units_sha256": units_digest(units_path).sha256,
        "retriever": spec.cache_fields("doc"),
        "shard_size": shard_size,
        "dtype": dtype or spec.dtype,
    }
    if (store := _reusable(out, job)) is not None:
        return store
    n_units = len(unit_tables(units_path)[1])
    if n_units == 0:
        raise DataError(units_path, None, None, "no units to encode")
    _bind_job(out, job)
    plan = plan_shards(n_units, shard_size)
    t0 = time.perf_counter()
    trainer, encoded, resumed = _encode_shared(units_path, spec, out, plan, job, trainer_args)
    if trainer is not None and not trainer.is_global_zero:  # ddp: rank 0 writes the manifest
        trainer.strategy.barrier("densex-manifest")
        store = EmbeddingStore.open(out)
        store.encoded_rows = encoded
        return store
    run = {
        "encoded_this_run": encoded,
        "resumed_shards": resumed,
        "processes": trainer.world_size if trainer is not None else 1,
        "seconds": time.perf_counter() - t0,
    }
    with locked(out, "embeddings"):  # one manifest, written by whoever finishes first
        store = open_embeddings(out)
        wrote = store is None
        if wrote:
            _write_manifest(out, spec, job, units_path, plan, n_units, run)
            store = EmbeddingStore.open(out)
        clear_claims(out, "emb-")
        remove_orphans(out)  # temp files of a writer killed while this process encoded
    if trainer is not None:
        trainer.strategy.barrier("densex-manifest")  # the other ranks wait for the manifest
    store.encoded_rows, store.reused = encoded, not wrote and encoded == 0
    return store


def _reusable(out: Path, job: dict[str, Any]) -> EmbeddingStore | None:
    """The complete, verified store of `job` in `out` (marked reused), or None; temp files of
    dead writers are removed first."""
    remove_orphans(out)
    store = open_embeddings(out)
    if store is not None and all(store.manifest.get(k) == v for k, v in job.items()):
        store.reused = True
        return store
    return None


def _encode_shared(
    units_path: Path, spec: RetrieverSpec, out: Path, plan: list[tuple[int, int]],
    job: dict[str, Any], trainer_args: Any,
) -> tuple[pl.Trainer | None, int, int]:  # fmt: skip
    """Encode the shards not on disk, sharing them with any other process encoding `out`
    (`utils.locks.share_pending`: each pass claims what nobody holds, then waits for the shards
    held elsewhere). Returns (the last trainer, rows this process encoded, shards complete at
    the start)."""
    done = _complete_shards(out, plan, job["dtype"])
    for shard in plan:  # damaged files were reported: encode those shards again
        if shard not in done and shard_written(out, shard):
            (out / f"emb-{shard_stem(*shard)}.npy").unlink(missing_ok=True)
    state: dict[str, Any] = {"trainer": None, "rows": 0}

    def run(pending: list[tuple[int, int]]) -> None:
        n_done = len(plan) - len(pending)
        trainer, rows = _encode_pending(
            units_path, spec, out, pending, job["dtype"], trainer_args, n_done
        )
        state["trainer"], state["rows"] = trainer, state["rows"] + rows

    share_pending(
        plan, partial(shard_written, out), partial(shard_claim, out), run, "embedding shard"
    )
    missing = [sh for sh in plan if sh not in _complete_shards(out, plan, job["dtype"])]
    if missing:
        raise RuntimeError(f"encoding finished with {len(missing)} shards missing: {missing[:3]}")
    return state["trainer"], state["rows"], len(done)


def _bind_job(out: Path, job: dict[str, Any]) -> None:
    """Record the encoding `out` holds (`encoding.json`), or refuse a directory that holds
    another one."""
    out.mkdir(parents=True, exist_ok=True)
    job_path = out / "encoding.json"
    if not job_path.exists():
        write_json(job_path, job)
        return
    previous = read_json(job_path)
    for key, value in job.items():
        if previous.get(key) != value:
            raise DataError(job_path, None, key, "directory holds another encoding; use a new dir")


def _encode_pending(
    units_path: Path, spec: RetrieverSpec, out: Path, pending: list[tuple[int, int]],
    dtype: str, trainer_args: Any, n_done: int,
) -> tuple[pl.Trainer, int]:  # fmt: skip
    """Encode the pending shards this process claims with Lightning predict (each rank claims
    among its shards r, r+world, ...); (the trainer, rows it encoded), after every rank's
    shards are on disk (under ddp_spawn the workers' rows are counted as the pending rows)."""
    # Lightning only when something is encoded: opening a built cache never imports it (~3 s)
    from densex.retrieval.encode_lightning import (
        EmbeddingShardWriter,
        EncoderModule,
        UnitsDataModule,
        units_progress_bar,
    )
    from densex.utils.trainer import predict_trainer

    log.info(
        "encoding %d units in %d shards with %s (%d shards already done; %d torch threads)",
        sum(e - s for s, e in pending), len(pending), spec.name, n_done, torch.get_num_threads(),
    )  # fmt: skip
    encoder = load_encoder(spec, "doc")
    # late chunking: a shard is read as its units' passages (`retrieval.late_data`)
    texts = (LateShardTexts if spec.late_chunking else ShardTexts)(units_path, spec, encoder, out)
    writer = EmbeddingShardWriter(out, pending, texts, dtype)
    # encoding runs in the retriever's precision (part of the cache key), never the
    # trainer's: `trainer.precision=auto` must not turn cached fp32 vectors into bf16 ones
    trainer = predict_trainer(
        trainer_args,
        root_dir=out,
        callbacks=[writer, *units_progress_bar(trainer_args)],
        precision=spec.precision,
    )
    dm = UnitsDataModule(pending, texts, encoder, spec.batch_size)
    trainer.predict(EncoderModule(encoder), datamodule=dm, return_predictions=False)
    # with `strategy=ddp` every rank runs this: wait for all shards (ddp_spawn returns in the
    # main process only)
    trainer.strategy.barrier("densex-encode")
    spawned = trainer.world_size > 1 and writer.rows_written == 0  # the workers' writers
    return trainer, sum(e - s for s, e in pending) if spawned else writer.rows_written


def _write_manifest(
    out: Path, spec: RetrieverSpec, job: dict[str, Any], units_path: Path,
    plan: list[tuple[int, int]], n_units: int, run: dict[str, Any],
) -> None:  # fmt: skip
    """The complete directory's manifest: every shard with its size + content hash (verified
    before every reuse), the truncated units, and this run's figures."""
    dim = int(np.load(out / f"emb-{shard_stem(*plan[0])}.npy", mmap_mode="r").shape[1])
    truncated = _truncation_summary(out, plan)
    if truncated["count"]:
        log.warning(
            "%d units are longer than %s's max_length (%d tokens) and were truncated, e.g. %s",
            truncated["count"], spec.name, spec.max_length, truncated["examples"][:10],
        )  # fmt: skip
    shards = []
    for s, e in plan:
        emb, ids = f"emb-{shard_stem(s, e)}.npy", f"ids-{shard_stem(s, e)}.json"
        records = {"file": file_record(out / emb), "ids": file_record(out / ids)}
        shards.append({"file": emb, "ids": ids, "start": s, "end": e, "records": records})
    encoded, seconds = run["encoded_this_run"], run["seconds"]
    write_manifest(
        out / "manifest.json",
        kind="embeddings",
        complete=True,
        model=spec.doc_model_or_query,
        retriever=spec.cache_fields("doc"),
        dim=dim,
        dtype=job["dtype"],
        count=n_units,
        units_path=str(units_path.resolve()),
        units_sha256=job["units_sha256"],
        shard_size=job["shard_size"],
        shards=shards,
        truncated_units=truncated,
        **{**run, "seconds": round(seconds, 3)},
        units_per_second=round(encoded / seconds, 2) if encoded and seconds > 0 else None,
    )
