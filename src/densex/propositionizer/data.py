"""Passage -> propositions pairs for fine-tuning a propositionizer, as a LightningDataModule.

The pairs come from `pairs.py` (readers, article split); this module limits them, tokenises
them (`backbone.py`: what differs between T5 and bert2bert), and batches them: dynamic
padding, length-grouped training batches (`sampler.LengthGroupedSampler`) sharded per rank,
resumable mid-epoch (`utils.resume.ResumableDataLoader`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, DistributedSampler

from densex.propositionizer.backbone import end_token_id, target_ids, truncate_ids
from densex.propositionizer.pairs import (
    load_hf_pairs,
    load_jsonl_pairs,
    load_squad_open_pairs,
    split_articles,
)
from densex.propositionizer.resolve import SentenceSplitter
from densex.propositionizer.sampler import LengthGroupedSampler
from densex.propositionizer.sentence_pairs import sentence_pairs
from densex.propositionizer.sources import PairSource, first_articles, read_sources
from densex.utils.logging import get_logger
from densex.utils.resume import ResumableDataLoader, epoch_batches_done

log = get_logger(__name__)

__all__ = ["PropositionDataModule"]


class PropositionDataModule(pl.LightningDataModule):
    """Tokenised passage -> propositions pairs with dynamic padding and length-grouped batches.

    `format` picks the reader: ``squad-open`` (`passages` + `propositions` JSONL), ``sources``
    (`sources`: several such pairs of files, each with its own article split;
    `sources.read_sources`), ``hf`` (`path`: a `save_to_disk` directory, or `dataset`: an
    in-memory `datasets.Dataset`) or ``jsonl`` (`path`). The tokenizer comes from the model
    (`set_tokenizer`), because a tiny test model's vocabulary is trained on these very pairs.
    `max_total_length` (a prefix LM, whose source and target share the positions) also cuts
    each target to that many tokens minus its source's. `sentence_pairs` adds, to the training pairs only, one pair per sentence
    of each training passage (`sentence_pairs.py`; sentences split by `spacy_model`, as
    `propositionizer.per_sentence` splits them at inference), each reading its passage's
    `context_sentences` earlier sentences (-1: all; `propositionizer.context_sentences` must
    match at inference); `passage_pairs: false` then trains on those pairs alone.

    Splits are by article (`pairs.split_articles`): `test_fraction` of the articles are held
    out of training and validation altogether (the test articles; never read here),
    `val_fraction` validate (with ``sources``, each source's fractions instead: the top-level
    ones must be None); `val_pairs_all` keeps every validation pair (`limit_val` limits
    the ones the module validates on). `train_articles` trains on the first N training
    articles in a fixed order (`sources.first_articles`), before `limit_train`.
    """

    def __init__(
        self,
        format: str = "squad-open",
        passages: str | None = None,
        propositions: str | None = None,
        path: str | None = None,
        split: str | None = "train",
        val_path: str | None = None,
        val_split: str | None = None,
        val_fraction: float | None = 0.1,
        validate_on_train: bool = False,
        limit_train: int | None = None,
        limit_val: int | None = None,
        max_source_length: int = 512,
        max_target_length: int = 512,
        max_total_length: int | None = None,
        per_device_batch_size: int = 8,
        eval_batch_size: int | None = None,
        group_by_length: bool = True,
        num_workers: int = 0,
        pad_to_multiple_of: int | None = None,
        seed: int = 42,
        dataset: Any = None,
        sentence_pairs: bool = False,
        spacy_model: str | None = "en_core_web_lg",
        test_fraction: float | None = 0.0,
        context_sentences: int = 0,
        passage_pairs: bool = True,
        sources: Sequence[PairSource] | None = None,
        train_articles: int | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["dataset", "sources"])
        self.hparams["sources"] = [asdict(s) for s in sources or ()]  # logged, as plain values
        self.sources = list(sources or ())
        self.dataset = dataset
        self.tokenizer = None
        self.train_pairs: list[dict[str, Any]] = []
        self.val_pairs: list[dict[str, Any]] = []
        self.val_pairs_all: list[dict[str, Any]] = []
        self.stats: dict[str, int] = {}
        self._loaded = False

    # ---- pairs -------------------------------------------------------------------------------
    def _read(self, path: str | None, split: str | None) -> list[dict[str, Any]]:
        h = self.hparams
        if h.format == "squad-open":
            if not (h.passages and h.propositions):
                raise ValueError("data.format=squad-open needs data.passages and data.propositions")
            return load_squad_open_pairs(h.passages, h.propositions)
        if h.format == "hf":
            return load_hf_pairs(self.dataset if self.dataset is not None else path, split=split)
        if h.format == "jsonl":
            if not path:
                raise ValueError("data.format=jsonl needs data.path")
            return load_jsonl_pairs(path)
        raise ValueError(f"unknown data.format {h.format!r} (squad-open, hf, jsonl)")

    def _split(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(training, validation) pairs: the sources' splits, a separate validation file or
        split, or the article split of one reader's pairs (test articles dropped)."""
        h = self.hparams
        if h.format == "sources":
            if not self.sources or (h.val_fraction, h.test_fraction) != (None, None):
                raise ValueError("data.format=sources needs data.sources, each with its own "
                                 "fractions (data.val_fraction, data.test_fraction: null)")  # fmt: skip
            splits = read_sources(self.sources)
            return splits.train, splits.validation
        pairs = self._read(h.path, h.split)
        if h.val_path or h.val_split:  # a separate validation file / split (released data)
            return pairs, self._read(h.val_path or h.path, h.val_split or h.split)
        fractions = (0.0, 0.0) if h.validate_on_train else (h.val_fraction, h.test_fraction)
        train, val, _ = split_articles(pairs, *fractions)
        return train, val

    def load_pairs(self) -> None:
        """Read, split and limit the pairs (idempotent; cheap, no tokenizer needed)."""
        if self._loaded:
            return
        h = self.hparams
        train, val = self._split()
        train = first_articles(train, h.train_articles) if h.train_articles else train
        self.train_pairs = train[: h.limit_train] if h.limit_train else train
        if h.validate_on_train:  # overfitting checks: validate on the training pairs themselves
            val = self.train_pairs
        self.val_pairs_all = val
        self.val_pairs = val[: h.limit_val] if h.limit_val else val
        if not self.train_pairs:
            raise ValueError("no training pairs after split/limits")
        if h.sentence_pairs:
            extra = self._sentence_pairs(self.train_pairs)
            log.info("%d per-sentence pairs join the training pairs", len(extra))
            self.train_pairs = (self.train_pairs if h.passage_pairs else []) + extra
            self.stats["train/sentence_pairs"] = len(extra)
        elif not h.passage_pairs:
            raise ValueError("data.passage_pairs=false needs data.sentence_pairs=true")
        self._loaded = True
        log.info(
            "propositionizer data: %d train pairs (%d articles), %d validation pairs (%d articles)",
            len(self.train_pairs),
            len({p["title"] for p in self.train_pairs}),
            len(self.val_pairs),
            len({p["title"] for p in self.val_pairs}),
        )

    def _sentence_pairs(self, pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The per-sentence pairs of `pairs` (split by `spacy_model`)."""
        h = self.hparams
        return sentence_pairs(pairs, SentenceSplitter(h.spacy_model).many, h.context_sentences)

    def texts(self) -> list[str]:
        """Sources and targets of the training pairs (to train a tiny model's vocabulary)."""
        self.load_pairs()
        return [t for p in self.train_pairs for t in (p["source"], p["target"])]

    def set_tokenizer(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    # ---- tokenisation ------------------------------------------------------------------------
    def _encode(self, pairs: Sequence[dict[str, Any]], name: str) -> list[dict[str, Any]]:
        h, tok = self.hparams, self.tokenizer
        src = tok([p["source"] for p in pairs], add_special_tokens=True)["input_ids"]
        tgt = target_ids(tok, [p["target"] for p in pairs])
        end = end_token_id(tok)
        n_src = sum(len(s) > h.max_source_length for s in src)
        src = [truncate_ids(s, h.max_source_length, end) for s in src]
        room = [min(h.max_target_length, (h.max_total_length or 1 << 30) - len(s)) for s in src]
        n_tgt = sum(len(t) > r for t, r in zip(tgt, room))
        self.stats.update({f"{name}/truncated_sources": n_src, f"{name}/truncated_targets": n_tgt})
        self.stats[f"{name}/pairs"] = len(pairs)
        if n_src or n_tgt:
            log.warning(
                "%s: truncated %d/%d sources to %d tokens and %d/%d targets to %d tokens (or to fit)",
                name, n_src, len(pairs), h.max_source_length, n_tgt, len(pairs), h.max_target_length,
            )  # fmt: skip
        items = []
        for p, s, t, r in zip(pairs, src, tgt, room):
            t = truncate_ids(t, r, end)
            items.append(
                {
                    "input_ids": s,
                    "labels": t,
                    "id": p["id"],
                    "target": p["target"],
                    "source": p["source"],
                }
            )
        return items

    def setup(self, stage: str | None = None) -> None:
        if self.tokenizer is None:
            raise RuntimeError("PropositionDataModule.set_tokenizer(model tokenizer) before setup")
        self.load_pairs()
        if not hasattr(self, "train_items"):
            from transformers import DataCollatorForSeq2Seq

            self.train_items = self._encode(self.train_pairs, "train")
            self.val_items = self._encode(self.val_pairs, "val")
            self.collator = DataCollatorForSeq2Seq(
                self.tokenizer,
                label_pad_token_id=-100,
                pad_to_multiple_of=self.hparams.pad_to_multiple_of,
            )

    def _collate(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        """DataCollatorForSeq2Seq on the tensors; ids and raw targets ride along as lists."""
        extra = {k: [f[k] for f in features] for k in ("id", "target", "source")}
        batch = self.collator(
            [
                {
                    "input_ids": f["input_ids"],
                    "attention_mask": [1] * len(f["input_ids"]),
                    "labels": f["labels"],
                }
                for f in features
            ]
        )
        batch.update(extra)
        return dict(batch)

    def _replicas(self) -> tuple[int, int]:
        """(world size, global rank) of the attached trainer; (1, 0) without one."""
        trainer = getattr(self, "trainer", None)
        if trainer is None:
            return 1, 0
        return max(1, int(trainer.world_size)), int(trainer.global_rank)

    def train_dataloader(self) -> DataLoader:
        """Batches of `per_device_batch_size`; under DDP this rank's share, split here (the
        samplers are `DistributedSampler`s, so Lightning does not re-wrap and reshuffle them)."""
        h = self.hparams
        world, rank = self._replicas()
        sampler: DistributedSampler
        if h.group_by_length:
            sampler = LengthGroupedSampler(
                [len(x["input_ids"]) + len(x["labels"]) for x in self.train_items],
                h.per_device_batch_size,
                seed=h.seed,
                num_replicas=world,
                rank=rank,
            )
        else:  # reshuffled by (seed, epoch), so a mid-epoch resume meets the same order
            sampler = DistributedSampler(
                self.train_items, num_replicas=world, rank=rank, shuffle=True, seed=h.seed
            )
        # resumable mid-epoch: a checkpoint records the batches done, a restore skips them
        return ResumableDataLoader(
            self.train_items,
            batch_size=h.per_device_batch_size,
            sampler=sampler,
            collate_fn=self._collate,
            num_workers=h.num_workers,
            generator=torch.Generator().manual_seed(h.seed),  # workers' seeds: not the global RNG
            progress=self._train_batches_done,
        )

    def _train_batches_done(self) -> tuple[int, int]:
        return epoch_batches_done(getattr(self, "trainer", None))

    def val_dataloader(self) -> DataLoader:
        """Validation items sorted by source length (generation batches pad little); under DDP
        each rank takes every world-th item (padded with repeats, which validation drops by
        id when it gathers the predictions)."""
        h = self.hparams
        order = sorted(self.val_items, key=lambda x: -len(x["input_ids"]))
        world, rank = self._replicas()
        sampler = (
            DistributedSampler(order, num_replicas=world, rank=rank, shuffle=False)
            if world > 1
            else None
        )
        return DataLoader(
            order,
            batch_size=h.eval_batch_size or h.per_device_batch_size,
            sampler=sampler,
            shuffle=False,
            collate_fn=self._collate,
            num_workers=h.num_workers,
        )
