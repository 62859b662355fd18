"""The Lightning pieces of seq2seq generation: `PropositionGenerator` (a checkpoint's greedy
generation in `predict_step`, one predict batch = one shard of passages) and
`PropositionShardWriter` (each predicted shard written atomically as `SHARD_NAME`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import BasePredictionWriter
from torch.utils.data import DataLoader

from densex.propositionizer.backbone import load_seq2seq, output_decoder
from densex.utils.generation import generate_sorted
from densex.utils.io import write_jsonl
from densex.utils.models import resolve_dtype
from densex.utils.shards import rank_share

__all__ = ["SHARD_NAME", "PropositionGenerator", "PropositionShardWriter"]

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
        from transformers import AutoTokenizer  # lazy: seconds to import

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_name_or_path)
        self.tokenizer.model_max_length = self.max_source_length
        # loaded directly in an explicit dtype; `auto` waits for the device (on_predict_start)
        dtype = torch.float32 if self.dtype_name == "auto" else resolve_dtype(self.dtype_name)
        self.model = load_seq2seq(self.model_name_or_path, dtype=dtype)
        self.model.eval()

    def on_predict_start(self) -> None:
        self.model.to(resolve_dtype(self.dtype_name, self.device))

    def predict_dataloader(self) -> DataLoader:
        rank, world = self.trainer.global_rank, self.trainer.world_size
        mine = rank_share(self.shards, rank, world)
        if not mine and self.shards:
            # more ranks than pending shards: Lightning wants a batch on every rank, so an idle
            # rank generates for one passage of the first shard, which its writer never writes
            first = self.shards[0]
            mine = [
                {**first, "ids": first["ids"][:1], "sources": first["sources"][:1], "probe": True}
            ]
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
            decode=output_decoder(self.tokenizer),
        )

    def predict_step(self, batch: Mapping[str, Any], batch_idx: int) -> dict[str, Any]:
        texts, cut = self.generate(batch["sources"])
        probe = bool(batch.get("probe"))  # an idle rank's probe: never written
        return {
            "shard": batch["shard"],
            "ids": batch["ids"],
            "raw": texts,
            "cut": cut,
            "probe": probe,
        }


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
        if prediction.get("probe"):
            return
        rows = (
            {"id": i, "raw": r, "cut": c}
            for i, r, c in zip(prediction["ids"], prediction["raw"], prediction["cut"])
        )
        write_jsonl(self.shard_dir / SHARD_NAME.format(prediction["shard"]), rows)
