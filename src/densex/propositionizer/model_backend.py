"""The model backend: propositionize passages with a seq2seq checkpoint (`generator.py`:
Lightning `Trainer.predict`) over resumable shards keyed by the model, the passages and the
settings, then merge them into the standard propositions file (`output.write_propositions`).
Shards, dtype and fingerprint rules: docs/architecture.md, "Design notes: generation".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl

from densex.propositionizer import settings as spec
from densex.propositionizer.fingerprint import effective_dtype, model_fingerprint
from densex.propositionizer.generator import (
    PropositionGenerator,
    PropositionShardWriter,
    read_shard,
    shard_path,
)
from densex.propositionizer.output import (
    NO_SKIPS,
    manifest_path,
    passage_source,
    write_propositions,
)
from densex.propositionizer.resolve import SentenceSplitter
from densex.propositionizer.sentence_inputs import sentence_units
from densex.propositionizer.settings import DECODING_RULES, PARSE_FILTERS, ModelSettings
from densex.utils.cache import content_key, hash_file
from densex.utils.integrity import check_file, remove_orphans
from densex.utils.io import DataError, read_json
from densex.utils.locks import clear_claims, locked, share_pending
from densex.utils.logging import get_logger
from densex.utils.models import resolve_model
from densex.utils.progress import track
from densex.utils.records import Record
from densex.utils.shards import pending as shards_pending
from densex.utils.shards import plan_shards
from densex.utils.trainer import predict_trainer

log = get_logger(__name__)

__all__ = ["generate_with_model"]


def _generation_settings(
    opts: ModelSettings, trainer_args: dict[str, Any] | None
) -> dict[str, Any]:
    """The PropositionGenerator keyword arguments, with the dtype actually used (never the
    trainer's precision: see docs/architecture.md, "Propositionizer dtype"). The decoding rules are
    named only when set, so the shard keys of runs without it are unchanged."""
    names = ("batch_size", "max_source_length", "max_new_tokens", "num_beams")
    settings = {k: getattr(opts, k) for k in names}
    settings["dtype"] = effective_dtype(opts.dtype, trainer_args)
    for rule in (*DECODING_RULES, "lookahead", "shortlist"):  # named only when set
        if getattr(opts, rule) is not None:
            settings[rule] = getattr(opts, rule)
    if opts.runtime != "torch":
        settings |= {k: getattr(opts, k) for k in ("runtime", "quantization", "max_batch_tokens")}
    return settings


def _model_inputs(
    passages: list[Record], opts: ModelSettings
) -> tuple[list[Record], list[int] | None]:
    """What the model reads: the passages, or with `per_sentence` one unit per sentence
    (`sentence_inputs.py`; split by `opts.spacy_model`, the sentence units' splitter) and
    each unit's passage index."""
    if not opts.per_sentence:
        if opts.context_sentences:  # a context is the passage's earlier sentences
            raise ValueError("propositionizer.context_sentences needs per_sentence=true")
        return passages, None
    split = SentenceSplitter(opts.spacy_model)
    units, owners = sentence_units(
        passages,
        lambda texts: track(split.many(texts), "sentences", len(passages), "passages"),
        opts.context_sentences,
    )
    log.info("per sentence: %d passages -> %d model inputs", len(passages), len(units))
    return units, owners


def _plan_shards(
    passages: Sequence[Record], shard_size: int, unit: str = "passages"
) -> list[dict[str, Any]]:
    """Consecutive shards of `shard_size` inputs (`unit`: passages, or their sentences):
    `{"shard", "ids", "sources", "unit"}`."""
    return [
        {
            "shard": k,
            "ids": [p["id"] for p in passages[s:e]],
            "sources": [passage_source(p) for p in passages[s:e]],
            "unit": unit,
        }
        for k, (s, e) in enumerate(plan_shards(len(passages), shard_size))
    ]


def _run_pending(
    model: str,
    pending: list[dict[str, Any]],
    settings: dict[str, Any],
    shard_dir: Path,
    trainer_args: dict[str, Any] | None,
) -> pl.Trainer:
    """Generate the `pending` shards with `Trainer.predict`; the trainer, after every rank's
    shards are on disk (under ddp every rank runs this; rank 0 merges)."""
    module = PropositionGenerator(model, pending, **settings, shard_dir=shard_dir)
    # 32-true: the weights' own dtype decides; the trainer's `precision: auto` would
    # otherwise wrap predict_step in bf16 autocast behind the manifest's back
    trainer = predict_trainer(
        trainer_args, callbacks=[PropositionShardWriter(shard_dir)], precision="32-true"
    )
    trainer.predict(module, return_predictions=False)
    trainer.strategy.barrier("propositions-shards")  # every rank's shards are on disk
    return trainer


def _collect_shards(shards: Sequence[Record], shard_dir: Path) -> tuple[list[str], int]:
    """Every passage's raw output in passage order, and how many hit `max_new_tokens`."""
    raws: list[str] = []
    cut = 0
    for s in shards:
        rows = read_shard(shard_path(shard_dir, s["shard"]), s["ids"])
        if rows is None:
            raise RuntimeError(f"shard {s['shard']} missing after generation in {shard_dir}")
        raws += [r["raw"] for r in rows]
        cut += sum(bool(r.get("cut")) for r in rows)
    return raws, cut


def generate_with_model(
    passages: list[dict[str, Any]],
    passages_path: Path,
    opts: ModelSettings,
    out_path: Path,
    trainer_args: dict[str, Any] | None,
    skipped: Record | None = None,
) -> Path:
    """The model backend: resumable shards keyed by model, passages and settings, then merge
    into `out_path` (under ddp every rank calls this; rank 0 writes, the others wait);
    `trainer_args` are the `trainer` group's plain values, `skipped` the reader's counts."""
    if opts.model in (None, "???"):
        raise ValueError("propositionizer.model (a checkpoint: hub id or directory) is required")
    model = resolve_model(opts.model)
    settings = _generation_settings(opts, trainer_args)
    if opts.shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {opts.shard_size}")
    passages_sha, fingerprint = hash_file(passages_path), model_fingerprint(model)
    shard_dir = out_path.parent / "shards" / _shards_key(fingerprint, passages_sha, opts, settings)
    remove_orphans(shard_dir)  # temp files of a killed earlier run
    inputs, owners = _model_inputs(passages, opts)
    unit = "sentences" if opts.per_sentence else "passages"
    shards = _plan_shards(inputs, opts.shard_size, unit)
    done = _completeness(shard_dir)
    before = _merge_state(out_path)  # a merge written by another process changes it
    pending = shards_pending(shards, done)
    log.info(
        "propositionizer %s: %d %s in %d shards, %d to generate (%s)",
        *(model, len(inputs), unit, len(shards), len(pending), shard_dir),
    )
    t0 = time.perf_counter()
    runs: list[pl.Trainer] = []  # shards claimed one by one: processes on one dir share them
    share_pending(
        shards,
        done,
        lambda s: shard_path(shard_dir, s["shard"]),
        lambda todo: runs.append(_run_pending(model, todo, settings, shard_dir, trainer_args)),
        "propositions shard",
    )
    trainer = runs[-1] if runs else None
    if trainer is not None and not trainer.is_global_zero:  # ddp (not spawn): rank 0 merges
        trainer.strategy.barrier("propositions-merged")  # ... and the others wait for it
        return out_path
    record = {
        "model": model,
        "model_commit": fingerprint.get("commit"),
        "settings": _settings_record(settings, opts),
        "passages_file": str(passages_path),
        "passages_sha256": passages_sha,
        "shards": _shards_record(shard_dir, len(shards), len(pending)),
        "skipped": dict(skipped or NO_SKIPS),
        "generation_seconds": round(time.perf_counter() - t0, 3),
    }
    with locked(out_path, "propositions"):  # another process merged meanwhile: keep it
        if _merge_state(out_path) == before or not _merged(out_path):
            _merge(passages, inputs, owners, shards, shard_dir, out_path, opts, record)
        clear_claims(shard_dir, "shard-")
    if trainer is not None:
        trainer.strategy.barrier("propositions-merged")  # the other ranks may read it now
    return out_path


def _completeness(shard_dir: Path) -> Callable[[Record], bool]:
    """Whether a shard is complete (its file holds exactly its ids); a shard once complete
    stays so, so each is read once however often the pending shards are checked."""
    valid: set[int] = set()

    def done(s: Record) -> bool:
        path = shard_path(shard_dir, s["shard"])
        if s["shard"] not in valid and read_shard(path, s["ids"]) is not None:
            valid.add(s["shard"])
        return s["shard"] in valid

    return done


def _merge(
    passages: list[Record], units: list[Record], owners: list[int] | None,
    shards: Sequence[Record], shard_dir: Path, out_path: Path, opts: ModelSettings,
    record: dict[str, Any],
) -> None:  # fmt: skip
    """Every shard's raw outputs, parsed, into the propositions file + manifest (`record`);
    `units` / `owners`: the model's inputs and each one's passage (`_model_inputs`)."""
    raws, cut = _collect_shards(shards, shard_dir)
    write_propositions(
        passages,
        raws,
        out_path,
        fallback=opts.fallback,
        spacy_model=opts.spacy_model,
        limits=opts.limits(),
        type="model",
        hit_max_new_tokens=cut,
        units=units,
        owners=owners,
        **{name: getattr(opts, name) for name in PARSE_FILTERS},
        **record,
    )


def _merge_state(out_path: Path) -> tuple[int, int] | None:
    """(size, mtime_ns) of the propositions manifest, None when there is none."""
    try:
        st = manifest_path(out_path).stat()
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns


def _merged(out_path: Path) -> bool:
    """Whether `out_path` holds a complete merge (its manifest's size + hash match): another
    process merged the same shards while this one waited for the lock."""
    try:
        record = read_json(manifest_path(out_path)).get("file")
    except DataError:
        return False
    return record is not None and check_file(out_path, record) is None


_NOT_KEYED = ("batch_size", "max_batch_tokens", "lookahead")  # cost, not tokens


def _shards_key(
    fingerprint: dict[str, Any], passages_sha: str, opts: ModelSettings, settings: dict[str, Any]
) -> str:
    """The shard directory's key: model, passages, shard size, generation settings, the code's
    `DECODER_VERSION` (from 1). bf16 vs fp32 can flip near-ties: dtype is keyed; batch_size
    changes no tokens in principle and is not (a resume may change it)."""
    per_sentence = {"per_sentence": True} if opts.per_sentence else {}  # old keys unchanged
    per_sentence |= spec.decoder_key()
    if opts.per_sentence and opts.context_sentences:
        per_sentence["context_sentences"] = opts.context_sentences
    if opts.shortlist:  # keyed by the file's content, not only its path
        per_sentence["shortlist_sha256"] = hash_file(Path(opts.shortlist))
    return content_key(
        model=fingerprint,
        passages=passages_sha,
        shard_size=opts.shard_size,
        **{k: v for k, v in settings.items() if k not in _NOT_KEYED},
        **per_sentence,
    )


def _settings_record(settings: dict[str, Any], opts: ModelSettings) -> dict[str, Any]:
    """The manifest's `settings`: the generation settings, the dtype asked for, the shard size
    and the decoding."""
    return {
        **settings,
        "dtype_requested": opts.dtype,
        "shard_size": opts.shard_size,
        "decoding": "greedy" if opts.num_beams == 1 else "beam",
        "per_sentence": bool(opts.per_sentence),
        "context_sentences": opts.context_sentences if opts.per_sentence else 0,
        **{name: getattr(opts, name) for name in PARSE_FILTERS},
    }


def _shards_record(shard_dir: Path, total: int, generated: int) -> dict[str, Any]:
    """The manifest's `shards`: where they are, how many, how many this run generated."""
    return {
        "dir": str(shard_dir),
        "total": total,
        "generated": generated,
        "reused": total - generated,
    }
