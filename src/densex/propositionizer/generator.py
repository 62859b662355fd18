"""The Lightning pieces of seq2seq generation: `PropositionGenerator` (a checkpoint's
generation in `predict_step`, one predict batch = one shard of passages) and
`PropositionShardWriter` (each predicted shard written atomically as `SHARD_NAME`)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import BasePredictionWriter
from torch.utils.data import DataLoader, IterableDataset

from densex.propositionizer.backbone import load_seq2seq, output_decoder
from densex.propositionizer.content_pieces import content_vocab
from densex.propositionizer.fingerprint import runtime_dtype
from densex.propositionizer.shortlist import model_shortlist
from densex.utils.generation import generate_sorted
from densex.utils.io import DataError, read_jsonl, write_jsonl
from densex.utils.locks import claim_each, release
from densex.utils.logging import get_logger
from densex.utils.models import resolve_dtype
from densex.utils.progress import Progress, is_tty
from densex.utils.records import Record
from densex.utils.shards import rank_share

log = get_logger("densex.propositionizer.model_backend")  # generation's lines keep one name

__all__ = [
    "SHARD_NAME",
    "ClaimedShards",
    "PropositionGenerator",
    "PropositionShardWriter",
    "RUNTIMES",
    "read_shard",
    "shard_path",
]

SHARD_NAME = "shard-{:05d}.jsonl"
RUNTIMES = ("torch", "ctranslate2")


class PropositionGenerator(pl.LightningModule):
    """Greedy seq2seq generation in `predict_step`; one predict batch = one shard of passages.

    `runtime` torch runs the checkpoint in torch (`dtype` auto: `fingerprint.runtime_dtype`,
    bf16 where the device multiplies it natively); ctranslate2 runs a T5/Flan-T5 through
    CTranslate2 (`ct2.py`; `quantization` its compute type, `max_batch_tokens` its batches,
    `convert_dir` where its conversion is cached). `lookahead`: the copy student's drafted
    tokens per greedy step (null: its default; exact, `copy_decode.py`).

    The checkpoint is loaded in `setup` (in every process, after ddp_spawn pickles the module),
    so the module itself is cheap to pickle. `shards` is a list of
    `{"shard": int, "ids": [...], "sources": [...]}`; each rank takes every world_size-th one.
    """

    def __init__(
        self,
        model_name_or_path: str,
        shards: Sequence[Record] = (),
        batch_size: int = 8,
        max_source_length: int = 512,
        max_new_tokens: int = 512,
        num_beams: int = 1,
        dtype: str = "auto",
        shard_dir: str | os.PathLike | None = None,
        no_repeat_ngram_size: int | None = None,
        coverage_penalty: float | None = None,
        no_repeat_proposition: bool | None = None,
        end_penalty: float | None = None,
        context_penalty: float | None = None,
        shortlist: str | None = None,
        lookahead: int | None = None,
        runtime: str = "torch",
        quantization: str = "auto",
        max_batch_tokens: int = 8192,
        convert_dir: str | os.PathLike | None = None,
    ):
        super().__init__()
        if runtime not in RUNTIMES:
            raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
        self.runtime, self.quantization = runtime, quantization
        self.max_batch_tokens = max_batch_tokens
        self.convert_dir = None if convert_dir is None else str(convert_dir)
        self.model_name_or_path = model_name_or_path
        self.shards = list(shards)
        self.shard_dir = None if shard_dir is None else str(shard_dir)
        self.batch_size, self.max_source_length = batch_size, max_source_length
        self.max_new_tokens, self.num_beams = max_new_tokens, num_beams
        # decoding rules, passed to `generate` only when set (settings.ModelSettings)
        rules = {
            "no_repeat_ngram_size": no_repeat_ngram_size,
            "coverage_penalty": coverage_penalty,
            "no_repeat_proposition": no_repeat_proposition,
            "end_penalty": end_penalty,
            "context_penalty": context_penalty,
            "lookahead": lookahead,  # the copy student's; null: its default (copy_decode)
        }
        self.generate_kwargs = {k: v for k, v in rules.items() if v is not None}
        self.shortlist = shortlist  # a file, read at setup (shortlist.py)
        self.dtype_name = dtype
        self.model = self.tokenizer = None

    def setup(self, stage: str | None = None) -> None:
        if self.model is not None:
            return
        from transformers import AutoTokenizer  # lazy: seconds to import

        if self.runtime == "ctranslate2":
            self.model, self.tokenizer = self._ctranslate2()
            return
        # loaded directly in an explicit dtype; `auto` waits for the device (on_predict_start)
        dtype = torch.float32 if self.dtype_name == "auto" else resolve_dtype(self.dtype_name)
        self.model = load_seq2seq(self.model_name_or_path, dtype=dtype)
        self.model.eval()
        # after the model: loading it registers the copy student's config, without which
        # AutoTokenizer reads its config.json as an unknown model type and warns
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_name_or_path)
        self.tokenizer.model_max_length = self.max_source_length
        if self.shortlist is not None:
            self.generate_kwargs["shortlist"] = model_shortlist(self.model, self.shortlist)
        end = self.generate_kwargs.get("end_penalty", getattr(self.model.config, "end_penalty", 0))
        if end:  # the word pieces it counts, read off the tokenizer
            self.generate_kwargs["content_vocab"] = content_vocab(self.tokenizer)

    def _ctranslate2(self) -> tuple[Any, Any]:
        """The checkpoint through CTranslate2 (`ct2.py`): converted once into `convert_dir`
        (default: beside the shard directories), T5-family checkpoints only."""
        from transformers import AutoConfig, AutoTokenizer, GenerationConfig

        from densex.propositionizer.ct2 import CT2Seq2Seq, compute_type, converted_model

        path = self.model_name_or_path
        kind = AutoConfig.from_pretrained(path).model_type
        if kind not in ("t5", "mt5", "umt5"):
            raise ValueError(f"runtime=ctranslate2 runs T5/Flan-T5 checkpoints, not {kind!r}")
        if self.convert_dir is None and self.shard_dir is None:
            raise ValueError("runtime=ctranslate2 needs convert_dir (where conversions are cached)")
        cache = self.convert_dir or str(Path(self.shard_dir).parent)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        compute = compute_type(self.quantization, device)
        tok = AutoTokenizer.from_pretrained(path)
        tok.model_max_length = self.max_source_length
        model = CT2Seq2Seq(
            converted_model(path, cache, compute),
            tok,
            GenerationConfig.from_pretrained(path),
            compute=compute,
            device=device,
            max_batch_tokens=self.max_batch_tokens,
        )
        return model, tok

    def on_predict_start(self) -> None:
        if self.runtime == "torch":
            self.model.to(runtime_dtype(self.dtype_name, self.device))

    def predict_dataloader(self) -> DataLoader:
        rank, world = self.trainer.global_rank, self.trainer.world_size
        mine = rank_share(self.shards, rank, world)
        return DataLoader(
            ClaimedShards(mine, self.shard_dir, probe=self.shards[:1]),
            batch_size=1,
            shuffle=False,
            collate_fn=_only,
        )

    def generate(
        self, sources: Sequence[str], unit: str = "passages"
    ) -> tuple[list[str], list[bool]]:
        """Generate for `sources` in length-sorted batches; return texts and, per text, whether
        it hit `max_new_tokens` without an end-of-sequence token (likely cut off). `unit`
        names the sources in progress lines (passages, or sentences)."""
        if self.model is None:
            self.setup()
        # a shard can take minutes on a CPU: periodic log lines within it where no bar is
        # drawn (a terminal has Lightning's bar, one step per shard), and its rate at the end
        every = float("inf") if is_tty() else None
        with Progress("propositions", len(sources), unit, every, tty=False) as progress:
            # CTranslate2 batches by tokens within a call: one call per shard
            batch = len(sources) if self.runtime == "ctranslate2" else self.batch_size
            out = generate_sorted(
                self.model,
                self.tokenizer,
                sources,
                max(1, batch),
                self.max_new_tokens,
                self.num_beams,
                on_batch=progress.advance,
                decode=output_decoder(self.tokenizer),
                generate_kwargs=self.generate_kwargs,
            )
        return out

    def predict_step(self, batch: Record, batch_idx: int) -> dict[str, Any]:
        texts, cut = self.generate(batch["sources"], batch.get("unit", "passages"))
        probe = bool(batch.get("probe"))  # an idle rank's probe: never written
        return {
            "shard": batch["shard"],
            "ids": batch["ids"],
            "raw": texts,
            "cut": cut,
            "probe": probe,
        }


def shard_path(shard_dir: str | os.PathLike, shard: int) -> Path:
    """The file of shard number `shard` (also the artifact its claim locks)."""
    return Path(shard_dir) / SHARD_NAME.format(shard)


def read_shard(path: Path, ids: Sequence[str]) -> list[dict[str, Any]] | None:
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


def _shard_done(shard_dir: str, shard: Record) -> bool:
    return read_shard(shard_path(shard_dir, shard["shard"]), shard["ids"]) is not None


def _shard_claim(shard_dir: str, shard: Record) -> Path:
    return shard_path(shard_dir, shard["shard"])


class ClaimedShards(IterableDataset):
    """The shards (one predict batch each) this process claims: one written already or claimed
    by another process is skipped (`utils.locks.claim_each`), so processes on one pending
    directory share its shards; a claim is held until `PropositionShardWriter` writes the shard.
    Nothing claimable (or more ranks than shards): one probe passage of `probe`, never written.
    `shard_dir` None claims nothing (every shard is generated)."""

    def __init__(self, shards: Sequence[Record], shard_dir: str | None, probe: Sequence = ()):
        self.shards, self.shard_dir, self.probe = list(shards), shard_dir, list(probe)

    def __len__(self) -> int:  # an upper bound: shards claimed elsewhere are skipped
        return max(1, len(self.shards))

    def __iter__(self) -> Iterator[Record]:
        claimed = iter(self.shards)
        if self.shard_dir is not None:
            claimed = claim_each(
                self.shards,
                partial(_shard_claim, self.shard_dir),
                partial(_shard_done, self.shard_dir),
                "propositions shard",
            )
        n = 0
        for shard in claimed:
            n += 1
            unit = shard.get("unit", "passages")
            log.info("generating shard %d (%d %s)", shard["shard"], len(shard["ids"]), unit)
            yield shard
        if not n and (self.probe or self.shards):
            first = (self.probe or self.shards)[0]
            yield {**first, "ids": first["ids"][:1], "sources": first["sources"][:1], "probe": True}


def _only(batch: list[Any]) -> Any:
    """Collate for one-shard batches (a module-level function, so ddp_spawn can pickle it)."""
    return batch[0]


class PropositionShardWriter(BasePredictionWriter):
    """Writes each predicted shard atomically as `shard-XXXXX.jsonl` of `{"id", "raw", "cut"}`,
    then releases its claim."""

    def __init__(self, shard_dir: str | os.PathLike):
        super().__init__(write_interval="batch")
        self.shard_dir = Path(shard_dir)

    def write_on_batch_end(
        self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx=0
    ) -> None:
        if prediction.get("probe"):
            return
        columns = zip(prediction["ids"], prediction["raw"], prediction["cut"])
        rows = ({"id": i, "raw": r, "cut": c} for i, r, c in columns)
        path = shard_path(self.shard_dir, prediction["shard"])
        write_jsonl(path, rows)
        release(path)  # the claim `ClaimedShards` took
