"""Encode a units file into sharded, resumable embeddings with Lightning `Trainer.predict`.

Rows are cut into shards of fixed global row ranges (`emb-<start>-<end>.npy` + `ids-...json`),
so the files do not depend on how many processes wrote them. Each shard is written atomically
once all its rows are encoded; a rerun after a crash skips complete shards. With
`trainer.devices=N` (ddp_spawn on CPU, ddp on GPUs) rank r encodes pending shards r, r+N, ...
so no unit is lost or duplicated. Within a shard rows are fed longest-first (less padding), and
written back in file order.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import BasePredictionWriter, RichProgressBar
from rich.progress import ProgressColumn
from rich.text import Text
from torch.utils.data import DataLoader, Dataset

from densex.corpus.columnar import ArrowTable
from densex.corpus.units import unit_tables
from densex.retrieval.encoders import TextEncoder, format_unit_texts, load_encoder
from densex.retrieval.spec import RetrieverSpec
from densex.utils.cache import hash_file
from densex.utils.integrity import (
    DamagedArtifact,
    file_record,
    handle_damage,
    remove_orphans,
    verify_files,
)
from densex.utils.io import (
    DataError,
    atomic_open,
    read_json,
    write_json,
    write_manifest,
)
from densex.utils.logging import get_logger
from densex.utils.progress import is_tty
from densex.utils.shards import pending as shards_pending
from densex.utils.shards import plan_shards, rank_share, shard_stem
from densex.utils.trainer import predict_trainer

log = get_logger(__name__)


# ----------------------------------------------------------------------------- storage


class EmbeddingStore:
    """A complete embeddings directory: memory-mapped shards, ids and the manifest."""

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root, self.manifest = root, manifest
        self._ids: list[str] | None = None
        self.reused = False  # set by `encode_units_to_dir` when nothing was encoded

    @classmethod
    def open(cls, root: str | Path) -> EmbeddingStore:
        """Open a complete directory, every shard checked against the manifest's size and
        content hash first (`utils.integrity`); a mismatch raises `DamagedArtifact` with
        `.problems` = [(file, why), ...]."""
        root = Path(root)
        man = read_json(root / "manifest.json")
        if not man.get("complete"):
            raise DataError(root / "manifest.json", None, "complete", "encoding is not complete")
        for sh in man["shards"]:
            for key in ("file", "ids"):
                if not (root / sh[key]).exists():
                    raise DataError(root / sh[key], None, None, "shard listed in manifest missing")
        records = {}
        for sh in man["shards"]:
            records[sh["file"]] = (sh.get("records") or {}).get("file")
            records[sh["ids"]] = (sh.get("records") or {}).get("ids")
        problems = verify_files(root, records)
        if problems:
            path, why = problems[0]
            err = DamagedArtifact(path, None, None, f"damaged embedding shard: {why}")
            err.problems = problems
            raise err
        return cls(root, man)

    @property
    def dim(self) -> int:
        return int(self.manifest["dim"])

    @property
    def dtype(self) -> str:
        return str(self.manifest["dtype"])

    def __len__(self) -> int:
        return int(self.manifest["count"])

    @property
    def ids(self) -> list[str]:
        if self._ids is None:
            ids: list[str] = []
            for sh in self.manifest["shards"]:
                ids.extend(read_json(self.root / sh["ids"]))
            self._ids = ids
        return self._ids

    def shard_arrays(self) -> list[tuple[int, np.ndarray]]:
        """(start row, read-only memmap [rows, dim]) per shard, in row order."""
        return [
            (sh["start"], np.load(self.root / sh["file"], mmap_mode="r"))
            for sh in self.manifest["shards"]
        ]

    def iter_arrays(self, chunk_rows: int = 65536):
        """(start row, block) pieces of at most `chunk_rows` rows, never the whole corpus at once;
        each shard is mapped only while its blocks are read (its pages leave RSS after)."""
        for sh in self.manifest["shards"]:
            arr = np.load(self.root / sh["file"], mmap_mode="r")
            for s in range(0, len(arr), chunk_rows):
                yield sh["start"] + s, arr[s : s + chunk_rows]
            del arr

    @property
    def embeddings(self) -> np.ndarray:
        """All rows: the memmap itself for one shard, an in-memory concatenation otherwise."""
        arrays = [a for _, a in self.shard_arrays()]
        if len(arrays) == 1:
            return arrays[0]
        if not arrays:
            return np.zeros((0, self.dim), dtype=self.dtype)
        return np.concatenate(arrays)


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


# ----------------------------------------------------------------------------- Lightning parts


class ShardTexts:
    """The texts of one shard at a time, read from the memory-mapped unit tables.

    Holds only the units path until first use in a process (so ddp_spawn pickles a path, not a
    table), then formats one shard's units for the encoder, orders them longest first (less
    padding; stable, so ties keep file order) and records the units the tokenizer truncates
    (`trunc-<stem>.json`). Memory: one shard's texts, whatever the corpus size.
    """

    def __init__(self, units_path: str | Path, spec: RetrieverSpec, encoder: Any, out: Path):
        self.units_path, self.spec, self.encoder, self.out = Path(units_path), spec, encoder, out
        self._shard: tuple[int, int] | None = None
        self._in_memory: tuple[ArrowTable | None, ArrowTable] | None = None
        self._texts: list = []
        self._order: list[int] = []

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_shard=None, _texts=[], _order=[], _in_memory=None)
        return state

    def _tables(self) -> tuple[ArrowTable | None, ArrowTable]:
        """Arrow shards: mapped afresh on each call; a standalone JSONL file: read once."""
        if self._in_memory is not None:
            return self._in_memory
        tables = unit_tables(self.units_path)
        if tables[0] is None:
            self._in_memory = tables
        return tables

    def ids(self, shard: tuple[int, int]) -> list[str]:
        return self._tables()[1].slice("id", *shard)

    def get(self, shard: tuple[int, int]) -> tuple[list, list[int]]:
        """(texts of rows shard[0]..shard[1], rows in encoding order). The tables are mapped
        afresh for each shard and unmapped after, so pages read stay out of RSS."""
        if shard != self._shard:
            passages, units = self._tables()
            if passages is None:  # a standalone units file: titles are its own
                titles = units.slice("title", *shard)
            else:
                rows = units.table.column("passage_row").slice(shard[0], shard[1] - shard[0])
                titles = passages.take("title", rows.to_numpy())
            texts = format_unit_texts(self.spec, titles, units.slice("text", *shard))
            ids = units.slice("id", *shard)
            del passages, units
            order, truncated = _length_order(self.encoder, texts, range(*shard))
            cut = [uid for uid, t in zip(ids, truncated) if t]
            write_json(self.out / f"trunc-{shard_stem(*shard)}.json", cut, indent=None)
            self._shard, self._texts, self._order = shard, texts, order
        return self._texts, self._order


class UnitsDataset(Dataset):
    """(row, text) for the shards one process encodes, shard after shard, each longest first."""

    def __init__(
        self, shards: Sequence[tuple[int, int]], texts: ShardTexts, limit: int | None = None
    ) -> None:
        self.shards, self.texts, self.limit = list(shards), texts, limit
        self._ends = np.cumsum([e - s for s, e in self.shards])

    def __len__(self) -> int:
        n = int(self._ends[-1]) if len(self._ends) else 0
        return n if self.limit is None else min(n, self.limit)

    def __getitem__(self, i: int) -> tuple[int, Any]:
        w = int(np.searchsorted(self._ends, i, side="right"))
        shard = self.shards[w]
        texts, order = self.texts.get(shard)
        row = order[i - (int(self._ends[w - 1]) if w else 0)]
        return row, texts[row - shard[0]]


class _Collate:
    """Tokenise a batch in the loader (a class, not a closure, so ddp_spawn can pickle it)."""

    def __init__(self, encoder: TextEncoder) -> None:
        self.encoder = encoder

    def __call__(self, batch: list[tuple[int, Any]]) -> dict[str, Any]:
        rows = torch.tensor([r for r, _ in batch], dtype=torch.long)
        features = dict(self.encoder.tokenize([t for _, t in batch]))
        features["rows"] = rows
        return features


class UnitsDataModule(pl.LightningDataModule):
    """Gives rank r the pending shards r, r+world, ...: whole shards, so each is written once."""

    def __init__(
        self,
        shards: Sequence[tuple[int, int]],
        texts: ShardTexts,
        encoder: TextEncoder,
        batch_size: int,
    ) -> None:
        super().__init__()
        self.shards, self.texts = list(shards), texts
        self.encoder, self.batch_size = encoder, batch_size

    def predict_dataloader(self) -> DataLoader:
        rank, world = self.trainer.global_rank, self.trainer.world_size
        mine = rank_share(self.shards, rank, world)
        # more ranks than pending shards: Lightning wants a batch on every rank, so an idle
        # rank encodes one row of the first shard, which its writer never completes or writes
        dataset = (
            UnitsDataset(mine, self.texts)
            if mine or not self.shards
            else UnitsDataset(self.shards[:1], self.texts, limit=1)
        )
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=False,
            collate_fn=_Collate(self.encoder),
        )


class EncoderModule(pl.LightningModule):
    """The document encoder under `Trainer.predict`: batch -> {rows, float32 embeddings}."""

    def __init__(self, encoder: TextEncoder) -> None:
        super().__init__()
        self.encoder = encoder

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, torch.Tensor]:
        features = {k: v for k, v in batch.items() if k != "rows"}
        return {"rows": batch["rows"].cpu(), "embeddings": self.encoder(features).float().cpu()}


class EmbeddingShardWriter(BasePredictionWriter):
    """Collects rows per shard; writes a shard (ids, then .npy, each atomic) once it is full."""

    def __init__(
        self,
        out_dir: str | Path,
        shards: Sequence[tuple[int, int]],
        texts: ShardTexts,
        dtype: str,
    ) -> None:
        super().__init__("batch")
        self.out_dir, self.shards, self.texts, self.dtype = (
            Path(out_dir),
            list(shards),
            texts,
            dtype,
        )
        self._starts = np.array([s for s, _ in self.shards], dtype=np.int64)
        self._buffers: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.shards_written = 0

    def write_on_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        prediction: dict[str, torch.Tensor],
        batch_indices: Sequence[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        rows = prediction["rows"].numpy()
        emb = prediction["embeddings"].numpy()
        which = np.searchsorted(self._starts, rows, side="right") - 1
        for w in np.unique(which):
            shard = self.shards[w]
            sel = which == w
            if shard not in self._buffers:
                n = shard[1] - shard[0]
                self._buffers[shard] = (
                    np.zeros((n, emb.shape[1]), dtype=np.float32),
                    np.zeros(n, dtype=bool),
                )
            buf, seen = self._buffers[shard]
            local = rows[sel] - shard[0]
            if seen[local].any():
                raise RuntimeError(f"rows encoded twice in shard {shard}")
            buf[local], seen[local] = emb[sel], True
            if seen.all():
                self._write_shard(shard, buf)
                del self._buffers[shard]

    def _write_shard(self, shard: tuple[int, int], emb: np.ndarray) -> None:
        stem = shard_stem(*shard)
        write_json(self.out_dir / f"ids-{stem}.json", self.texts.ids(shard), indent=None)
        with atomic_open(self.out_dir / f"emb-{stem}.npy", "wb") as f:
            np.save(f, emb.astype(self.dtype, copy=False))
        self.shards_written += 1


class _UnitsSpeedColumn(ProgressColumn):
    def __init__(self, bar: UnitsProgressBar) -> None:
        super().__init__()
        self.bar = bar

    def render(self, task: Any) -> Text:
        return Text(f"{self.bar.units_per_second:,.1f} units/s", style="cyan")


class UnitsProgressBar(RichProgressBar):
    """Lightning's rich bar plus a units/s column (batches/s hides the batch size)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._units, self._t0 = 0, time.perf_counter()

    @property
    def units_per_second(self) -> float:
        return self._units / max(time.perf_counter() - self._t0, 1e-9)

    def configure_columns(self, trainer: pl.Trainer) -> list:
        return [*super().configure_columns(trainer), _UnitsSpeedColumn(self)]

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._units, self._t0 = 0, time.perf_counter()
        super().on_predict_start(trainer, pl_module)

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self._units += len(batch["rows"])
        super().on_predict_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)


def progress_callbacks(trainer_cfg: Mapping[str, Any] | Any | None) -> list:
    """The units/s progress bar, unless the trainer config turns progress bars off."""
    enabled = trainer_cfg.get("enable_progress_bar", True) if trainer_cfg is not None else True
    # without a terminal `predict_trainer` logs periodic lines (LogProgress) instead
    return [UnitsProgressBar()] if enabled and is_tty() else []


# ----------------------------------------------------------------------------- entry point


def _length_order(encoder: Any, texts: Sequence[Any], rows: range) -> tuple[list[int], np.ndarray]:
    """Rows of one shard, longest first by token count (stable, so ties keep file order), and
    which of them the tokenizer truncates (more tokens than it keeps). An encoder that neither
    pads nor truncates (`pads = False`: hashing) keeps file order, without a counting pass."""
    if not getattr(encoder, "pads", True):
        return list(rows), np.zeros(len(rows), dtype=bool)
    flat = [t if isinstance(t, str) else f"{t[0]} {t[1]}" for t in texts]
    lengths = np.asarray(encoder.token_lengths(flat))
    truncated = lengths > encoder.max_tokens
    return [rows[i] for i in np.argsort(-lengths, kind="stable")], truncated


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


def open_embeddings(out_dir: str | Path) -> EmbeddingStore | None:
    """The verified `EmbeddingStore` in `out_dir`, or None when there is none or it is damaged.

    A damaged store is reported (`cache.on_damaged`), and its manifest and damaged shards are
    removed, so that encoding into the same directory re-encodes exactly those shards.
    """
    out = Path(out_dir)
    if not (out / "manifest.json").exists():
        return None
    try:
        return EmbeddingStore.open(out)
    except DamagedArtifact as e:
        handle_damage(e.problems, "embeddings", f"rebuild: rm -r {out}")
        (out / "manifest.json").unlink(missing_ok=True)
        for path, _ in e.problems:
            path.unlink(missing_ok=True)
        return None


def encode_units_to_dir(
    units_path: str | Path,
    retriever_cfg: Mapping[str, Any] | Any,
    out_dir: str | Path,
    trainer_cfg: Mapping[str, Any] | Any | None = None,
    shard_size: int = 50_000,
    dtype: str | None = None,
) -> EmbeddingStore:
    """Encode every unit of `units_path` with the retriever's document encoder into `out_dir`.

    Resumes from complete shards; returns the opened `EmbeddingStore`. The directory is bound to
    one (units file, retriever, shard size, dtype): reusing it for another is a `DataError`.
    Encoding runs in `retriever.precision` (default 32-true), whatever `trainer_cfg.precision` says.
    """
    spec = (
        retriever_cfg
        if isinstance(retriever_cfg, RetrieverSpec)
        else RetrieverSpec.from_cfg(retriever_cfg)
    )
    units_path, out = Path(units_path), Path(out_dir)
    if not units_path.exists():
        raise DataError(units_path, None, None, "file not found")
    job = {
        "units_sha256": hash_file(units_path),
        "retriever": spec.cache_fields("doc"),
        "shard_size": shard_size,
        "dtype": dtype or spec.dtype,
    }
    remove_orphans(out)
    store = open_embeddings(out)
    if store is not None and all(store.manifest.get(k) == v for k, v in job.items()):
        store.reused = True
        return store
    n_units = len(unit_tables(units_path)[1])
    if n_units == 0:
        raise DataError(units_path, None, None, "no units to encode")
    _bind_job(out, job)
    plan = plan_shards(n_units, shard_size)
    done = _complete_shards(out, plan, job["dtype"])
    pending = shards_pending(plan, done.__contains__)
    t0 = time.perf_counter()
    trainer = _encode_pending(units_path, spec, out, pending, job["dtype"], trainer_cfg, len(done))
    if trainer is not None and not trainer.is_global_zero:  # ddp: rank 0 writes the manifest
        trainer.strategy.barrier("densex-manifest")
        return EmbeddingStore.open(out)
    missing = [sh for sh in plan if sh not in _complete_shards(out, plan, job["dtype"])]
    if missing:
        raise RuntimeError(f"encoding finished with {len(missing)} shards missing: {missing[:3]}")
    run = {
        "encoded_this_run": sum(e - s for s, e in pending),
        "resumed_shards": len(done),
        "processes": trainer.world_size if trainer is not None else 1,
        "seconds": time.perf_counter() - t0,
    }
    _write_manifest(out, spec, job, units_path, plan, n_units, run)
    if trainer is not None:
        trainer.strategy.barrier("densex-manifest")  # the other ranks wait for the manifest
    return EmbeddingStore.open(out)


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
    dtype: str, trainer_cfg: Any, n_done: int,
) -> pl.Trainer | None:  # fmt: skip
    """Encode the pending shards with Lightning predict (each rank its shards r, r+world, ...);
    the trainer (None when nothing was pending), after every rank's shards are on disk."""
    if not pending:
        return None
    log.info(
        "encoding %d units in %d shards with %s (%d shards already done)",
        sum(e - s for s, e in pending), len(pending), spec.name, n_done,
    )  # fmt: skip
    encoder = load_encoder(spec, "doc")
    texts = ShardTexts(units_path, spec, encoder, out)
    # encoding runs in the retriever's precision (part of the cache key), never the
    # trainer's: `trainer.precision=auto` must not turn cached fp32 vectors into bf16 ones
    trainer = predict_trainer(
        trainer_cfg,
        root_dir=out,
        callbacks=[
            EmbeddingShardWriter(out, pending, texts, dtype),
            *progress_callbacks(trainer_cfg),
        ],
        precision=spec.precision,
    )
    dm = UnitsDataModule(pending, texts, encoder, spec.batch_size)
    trainer.predict(EncoderModule(encoder), datamodule=dm, return_predictions=False)
    # with `strategy=ddp` every rank runs this: wait for all shards (ddp_spawn returns in the
    # main process only)
    trainer.strategy.barrier("densex-encode")
    return trainer


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
