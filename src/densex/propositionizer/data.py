"""Passage -> propositions pairs for fine-tuning a propositionizer, as a LightningDataModule.

A pair is ``{"id", "title", "source", "target"}``: the source is the paper's input string
``Title: {title}. Section: {section}. Content: {text}`` and the target the JSON list of
propositions (``json.dumps(..., ensure_ascii=False)``), exactly what the model must generate.
Three readers produce pairs: the shared squad-open files (passages + propositions joined on
id), the released Hugging Face training data (``sources``/``targets`` columns), and JSONL.
The train/validation split is by article, from a fixed hash of the title, so no article leaks
across it and the split does not change with file order, seeds or Python's hash salt.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, DistributedSampler

from densex.propositionizer.backbone import end_token_id, target_ids, truncate_ids
from densex.utils.io import DataError, numbered_jsonl
from densex.utils.logging import get_logger
from densex.utils.resume import ResumableDataLoader, epoch_batches_done

log = get_logger(__name__)

_TITLE_RE = re.compile(r"^Title:\s*(.*?)\.\s*Section:", re.DOTALL)


def format_source(title: str, section: str, text: str) -> str:
    """The propositionizer's input string (paper, Figure 8 and the released model card)."""
    return f"Title: {title}. Section: {section}. Content: {text}"


def format_target(propositions: Sequence[str]) -> str:
    """The generation target: a JSON list of propositions, non-ASCII kept as is."""
    return json.dumps(list(propositions), ensure_ascii=False)


def title_of_source(source: str) -> str:
    """The article title inside a source string (the split key for sources without metadata)."""
    m = _TITLE_RE.match(source)
    return m.group(1).strip() if m else source[:100]


def _check_propositions(value: Any, path: str | os.PathLike, line: int | None, name: str) -> list:
    """A target given as a list of strings or a JSON string of one; anything else is located."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise DataError(path, line, name, f"not a JSON list of propositions ({e.msg})") from e
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise DataError(path, line, name, "expected a list of proposition strings")
    if not value:
        raise DataError(path, line, name, "empty list of propositions")
    return value


def _check_unique(
    pid: str, seen: set[str], path: Any, line: int | None, generated: bool = False
) -> None:
    """Pair ids must be unique: validation de-duplicates predictions by id (DDP padding)."""
    if pid in seen:
        how = " (the line number, used as id for a row without one)" if generated else ""
        raise DataError(path, line, "id", f"duplicate id {pid!r}{how}")
    seen.add(pid)


def _pair(pid: str, title: str, source: str, propositions: list[str]) -> dict[str, Any]:
    return {"id": pid, "title": title, "source": source, "target": format_target(propositions)}


def load_squad_open_pairs(
    passages_path: str | os.PathLike, propositions_path: str | os.PathLike
) -> list[dict[str, Any]]:
    """Join passages.jsonl and propositions.jsonl on id; a missing partner is a located error."""
    passages: dict[str, tuple[int, dict]] = {}
    for lineno, row in numbered_jsonl(passages_path, required=("title", "text"), nonempty=("id",)):
        if row["id"] in passages:
            raise DataError(passages_path, lineno, "id", f"duplicate passage id {row['id']!r}")
        passages[row["id"]] = (lineno, row)
    pairs, seen = [], set()
    for lineno, row in numbered_jsonl(propositions_path, nonempty=("id",)):
        pid = row["id"]
        if pid not in passages:
            raise DataError(
                propositions_path, lineno, "id", f"no passage {pid!r} in {passages_path}"
            )
        if pid in seen:
            raise DataError(propositions_path, lineno, "id", f"duplicate id {pid!r}")
        seen.add(pid)
        props = _check_propositions(
            row.get("propositions"), propositions_path, lineno, "propositions"
        )
        _, p = passages[pid]
        pairs.append(
            _pair(
                pid, p["title"], format_source(p["title"], p.get("section") or "", p["text"]), props
            )
        )
    for pid, (lineno, _) in passages.items():
        if pid not in seen:
            raise DataError(
                passages_path,
                lineno,
                "id",
                f"passage {pid!r} has no propositions in {propositions_path}",
            )
    return pairs


def load_hf_pairs(
    dataset: Any,
    split: str | None = "train",
    source_field: str = "sources",
    target_field: str = "targets",
) -> list[dict[str, Any]]:
    """Pairs from the released training data's format: a `datasets.Dataset` (or DatasetDict,
    or a directory written by `save_to_disk`) with `sources` strings and JSON-string `targets`.

    Errors name the dataset, the row index (as the line) and the column.
    """
    import datasets

    where = str(dataset) if isinstance(dataset, (str, os.PathLike)) else "<datasets.Dataset>"
    if isinstance(dataset, (str, os.PathLike)):
        if not Path(dataset).exists():
            raise DataError(
                dataset, None, None, "dataset directory not found (save_to_disk format)"
            )
        dataset = datasets.load_from_disk(str(dataset))
    if isinstance(dataset, datasets.DatasetDict):
        if split not in dataset:
            raise DataError(where, None, None, f"no split {split!r} (have {list(dataset)})")
        dataset = dataset[split]
    for name in (source_field, target_field):
        if name not in dataset.column_names:
            raise DataError(where, None, name, f"missing column (have {dataset.column_names})")
    pairs, seen = [], set()
    for i, row in enumerate(dataset):
        source = row[source_field]
        if not isinstance(source, str) or not source.strip():
            raise DataError(where, i, source_field, "empty or not a string")
        props = _check_propositions(row[target_field], where, i, target_field)
        pid = str(row["id"]) if "id" in row else str(i)
        _check_unique(pid, seen, where, i)
        pairs.append(_pair(pid, title_of_source(source), source, props))
    return pairs


def load_jsonl_pairs(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Pairs from JSONL rows `{"source", "target"}` (also the released `sources`/`targets`
    spelling) or passage-style `{"title", "section", "text", "propositions"}`. A row without
    an `id` gets its line number; ids (given or not) must be unique."""
    pairs, seen = [], set()
    for lineno, row in numbered_jsonl(path):
        pid = str(row.get("id", lineno))
        _check_unique(pid, seen, path, lineno, generated="id" not in row)
        if "source" in row or "sources" in row:
            sk, tk = ("source", "target") if "source" in row else ("sources", "targets")
            source = row[sk]
            if not isinstance(source, str) or not source.strip():
                raise DataError(path, lineno, sk, "empty or not a string")
            if tk not in row:
                raise DataError(path, lineno, tk, "missing")
            props = _check_propositions(row[tk], path, lineno, tk)
            title = row.get("title") or title_of_source(source)
        elif "text" in row:
            for name in ("title", "propositions"):
                if name not in row:
                    raise DataError(path, lineno, name, "missing")
            props = _check_propositions(row["propositions"], path, lineno, "propositions")
            title = row["title"]
            source = format_source(title, row.get("section") or "", row["text"])
        else:
            raise DataError(
                path, lineno, "source", "missing (need source/target or title/text/propositions)"
            )
        pairs.append(_pair(pid, title, source, props))
    return pairs


def _title_bucket(title: str) -> float:
    """A fixed pseudo-random number in [0, 1) per title (SHA-1, stable across runs)."""
    return int(hashlib.sha1(title.encode("utf-8")).hexdigest()[:12], 16) / 16**12


def split_by_title(
    pairs: Sequence[dict[str, Any]], val_fraction: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train/validation split by article: a title goes to validation iff its hash < fraction.

    With a positive fraction and at least two articles, validation is never empty: if no
    title hashes under the fraction, the title with the smallest hash is used.
    """
    if val_fraction <= 0:
        return list(pairs), []
    titles = {p["title"] for p in pairs}
    val_titles = {t for t in titles if _title_bucket(t) < val_fraction}
    if not val_titles and len(titles) > 1:
        val_titles = {min(titles, key=_title_bucket)}
    if val_titles == titles and len(titles) > 1:
        val_titles.discard(max(titles, key=_title_bucket))
    train = [p for p in pairs if p["title"] not in val_titles]
    val = [p for p in pairs if p["title"] in val_titles]
    return train, val


class LengthGroupedSampler(DistributedSampler):
    """Shuffled indices in which neighbours have similar lengths, so padded batches waste little;
    with `num_replicas > 1`, this rank's share of whole batches.

    As in Hugging Face's sampler: shuffle (seed + epoch), cut into mega-batches of
    `mega_batches * batch_size * num_replicas` items, sort each by length (longest first), cut
    into batches of `batch_size`. Ranks take whole batches in turn, so each rank's batches are
    as well grouped as a single process's; the items left over after the last round of full
    batches are split evenly into one final (smaller) batch per rank. Every rank yields the
    same number of batches (`ceil(len(self) / batch_size)`), ranks are disjoint and together
    cover every index; only when fewer items than ranks are left over are a few repeated.

    A `DistributedSampler` subclass so that Lightning never wraps it in its own (shuffling)
    distributed sampler; `set_epoch` reshuffles.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        seed: int = 0,
        mega_batches: int = 50,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        self.lengths = list(lengths)
        super().__init__(
            self.lengths, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed
        )
        self.batch_size = batch_size
        self.mega = max(1, mega_batches) * batch_size * num_replicas

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _order(self) -> list[int]:
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        perm = torch.randperm(len(self.lengths), generator=g).tolist()
        order: list[int] = []
        for start in range(0, len(perm), self.mega):
            order += sorted(perm[start : start + self.mega], key=lambda i: -self.lengths[i])
        return order

    def _split(self, n: int) -> tuple[int, int]:
        """(full batches per rank, items left over for the final round)."""
        rounds = n // (self.batch_size * self.num_replicas)
        return rounds, n - rounds * self.batch_size * self.num_replicas

    def __len__(self) -> int:
        rounds, tail = self._split(len(self.lengths))
        if tail == 0:
            return rounds * self.batch_size
        tail = max(tail, self.num_replicas)
        share = tail // self.num_replicas + (self.rank < tail % self.num_replicas)
        return rounds * self.batch_size + share

    def __iter__(self) -> Iterator[int]:
        order = self._order()
        if self.num_replicas == 1:
            yield from order
            return
        bs, r, world = self.batch_size, self.rank, self.num_replicas
        rounds, tail = self._split(len(order))
        for b in range(rounds):
            start = (b * world + r) * bs
            yield from order[start : start + bs]
        if tail:
            rest = order[rounds * bs * world :]
            rest += order[: max(0, world - len(rest))]  # fewer items than ranks: repeat a few
            q, extra = divmod(len(rest), world)
            start = r * q + min(r, extra)
            yield from rest[start : start + q + (r < extra)]


class PropositionDataModule(pl.LightningDataModule):
    """Tokenised passage -> propositions pairs with dynamic padding and length-grouped batches.

    `format` picks the reader: ``squad-open`` (`passages` + `propositions` JSONL), ``hf``
    (`path`: a `save_to_disk` directory, or `dataset`: an in-memory `datasets.Dataset`) or
    ``jsonl`` (`path`). The tokenizer comes from the model (`set_tokenizer`), because a tiny
    test model's vocabulary is trained on these very pairs.
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
        val_fraction: float = 0.1,
        validate_on_train: bool = False,
        limit_train: int | None = None,
        limit_val: int | None = None,
        max_source_length: int = 512,
        max_target_length: int = 512,
        per_device_batch_size: int = 8,
        eval_batch_size: int | None = None,
        group_by_length: bool = True,
        num_workers: int = 0,
        pad_to_multiple_of: int | None = None,
        seed: int = 42,
        dataset: Any = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["dataset"])
        self.dataset = dataset
        self.tokenizer = None
        self.train_pairs: list[dict[str, Any]] = []
        self.val_pairs: list[dict[str, Any]] = []
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

    def load_pairs(self) -> None:
        """Read, split and limit the pairs (idempotent; cheap, no tokenizer needed)."""
        if self._loaded:
            return
        h = self.hparams
        pairs = self._read(h.path, h.split)
        if h.val_path or h.val_split:  # a separate validation file / split (released data)
            train, val = pairs, self._read(h.val_path or h.path, h.val_split or h.split)
        else:
            train, val = split_by_title(pairs, 0.0 if h.validate_on_train else h.val_fraction)
        self.train_pairs = train[: h.limit_train] if h.limit_train else train
        if h.validate_on_train:  # overfitting checks: validate on the training pairs themselves
            val = self.train_pairs
        self.val_pairs = val[: h.limit_val] if h.limit_val else val
        if not self.train_pairs:
            raise ValueError("no training pairs after split/limits")
        self._loaded = True
        log.info(
            "propositionizer data: %d train pairs (%d articles), %d validation pairs (%d articles)",
            len(self.train_pairs),
            len({p["title"] for p in self.train_pairs}),
            len(self.val_pairs),
            len({p["title"] for p in self.val_pairs}),
        )

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
        n_tgt = sum(len(t) > h.max_target_length for t in tgt)
        self.stats.update({f"{name}/truncated_sources": n_src, f"{name}/truncated_targets": n_tgt})
        self.stats[f"{name}/pairs"] = len(pairs)
        if n_src or n_tgt:
            log.warning(
                "%s: truncated %d/%d sources to %d tokens and %d/%d targets to %d tokens",
                name, n_src, len(pairs), h.max_source_length, n_tgt, len(pairs), h.max_target_length,
            )  # fmt: skip
        items = []
        for p, s, t in zip(pairs, src, tgt):
            s = truncate_ids(s, h.max_source_length, end)
            t = truncate_ids(t, h.max_target_length, end)
            items.append({"input_ids": s, "labels": t, "id": p["id"], "target": p["target"]})
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
        extra = {k: [f[k] for f in features] for k in ("id", "target")}
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
