"""Flan-T5 propositionizer as a LightningModule, validated by BERTScore set-F1.

Training is plain teacher-forced cross-entropy on ``source -> JSON list of propositions``.
Validation also generates greedily for every validation passage, parses the JSON and scores
the predicted set against the gold set with set-F1 (`densex.metrics.set_f1`), which is what
the checkpoint callback selects on (``val/set_f1``, max).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from densex.metrics.set_f1 import SetF1Result, SetF1Scorer
from densex.propositionizer.parse import parse_propositions
from densex.utils.io import mkdtemp, write_manifest
from densex.utils.logging import get_logger
from densex.utils.models import resolve_model

log = get_logger(__name__)

DEFAULT_METRIC = {"model_type": "roberta-large", "num_layers": 17, "idf": False, "batch_size": 64}


def parse_prediction(text: str) -> list[str] | None:
    """Propositions from a generated string (with the project's JSON repair,
    `propositionizer.parse`), or None when it cannot be parsed."""
    result = parse_propositions(text)
    return list(result.propositions) if result.ok else None


def prepare_model_path(
    name_or_path: str,
    texts: Sequence[str] = (),
    cache_dir: str | os.PathLike = ".cache",
    tiny: dict[str, Any] | None = None,
) -> str:
    """A loadable model: hub id or local path, or (``name_or_path == "tiny"``) a tiny T5 built
    into the cache, its sentencepiece vocabulary trained on `texts` and keyed by their hash
    (`densex.utils.tiny_t5.cached_tiny_t5`)."""
    if name_or_path != "tiny":
        return resolve_model(name_or_path)
    from densex.utils.tiny_t5 import cached_tiny_t5

    return str(cached_tiny_t5(cache_dir, texts, **dict(tiny or {})))


class PropositionizerModule(pl.LightningModule):
    """Seq2seq fine-tuning with the paper's optimiser (AdamW, lr 1e-4, weight decay 1e-4).

    `batch_size` (effective) and `per_device_batch_size` are recorded here; the pipeline turns
    them into the data loader batch size and `accumulate_grad_batches`. `metric` configures
    the set-F1 backbone (`SetF1Scorer` arguments).
    """

    def __init__(
        self,
        name_or_path: str,
        lr: float = 1e-4,
        weight_decay: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        scheduler: str = "constant",
        warmup_ratio: float = 0.0,
        max_new_tokens: int = 512,
        num_beams: int = 1,
        max_source_length: int = 512,
        batch_size: int = 64,
        per_device_batch_size: int = 8,
        gradient_checkpointing: bool = False,
        dropout: float | None = None,
        metric: dict[str, Any] | None = None,
        tiny: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        self.save_hyperparameters()
        path = resolve_model(name_or_path)
        # from_pretrained returns eval mode (dropout off); Lightning keeps submodule modes
        self.model = AutoModelForSeq2SeqLM.from_pretrained(path).train()
        self.tokenizer = AutoTokenizer.from_pretrained(path, model_max_length=max_source_length)
        if dropout is not None:  # e.g. 0 for overfitting checks; None keeps the model's own
            for m in self.model.modules():
                if isinstance(m, torch.nn.Dropout):
                    m.p = dropout
            if hasattr(self.model.config, "dropout_rate"):
                self.model.config.dropout_rate = dropout
        if gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.metric_cfg = {**DEFAULT_METRIC, **dict(metric or {})}
        self._scorer: SetF1Scorer | None = None
        self._val_outputs: list[dict[str, Any]] = []
        self.last_val_predictions: list[dict[str, Any]] = []

    # ---- training ----------------------------------------------------------------------------
    def forward(self, input_ids, attention_mask, labels=None):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = self(batch["input_ids"], batch["attention_mask"], batch["labels"]).loss
        n = batch["input_ids"].shape[0]
        self.log(
            "train/loss",
            loss,
            on_step=True,
            on_epoch=True,
            prog_bar=True,
            batch_size=n,
            sync_dist=True,
        )
        tokens = batch["attention_mask"].sum() + (batch["labels"] != -100).sum()
        self.log("train/tokens", tokens.float(), on_step=True, on_epoch=False, reduce_fx="sum")
        return loss

    # ---- validation --------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[str]:
        """Greedy (or beam, if configured) decoding of the JSON proposition list."""
        out = self.model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=self.hparams.max_new_tokens,
            num_beams=self.hparams.num_beams,
            do_sample=False,
        )
        return self.tokenizer.batch_decode(out, skip_special_tokens=True)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        loss = self(batch["input_ids"], batch["attention_mask"], batch["labels"]).loss
        n = batch["input_ids"].shape[0]
        self.log("val/loss", loss, on_epoch=True, prog_bar=True, batch_size=n, sync_dist=True)
        if self.trainer.sanity_checking:  # loss only: no need to load the metric model
            return
        for pid, pred, gold in zip(
            batch["id"], self.generate(batch["input_ids"], batch["attention_mask"]), batch["target"]
        ):
            self._val_outputs.append({"id": pid, "prediction": pred, "target": gold})

    def on_validation_epoch_start(self) -> None:
        self._val_outputs = []

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking or (not self._val_outputs and self.trainer.world_size == 1):
            return
        # Every rank scores all gathered rows (identical results, so the synced mean is the
        # rank-0 value): simpler than scoring on rank 0 and broadcasting, at the cost of
        # duplicated set-F1 work under DDP.
        outputs = self._gather(self._val_outputs)
        result = self.score_predictions(outputs)
        metrics = result.as_dict("val/")
        sync = self.trainer.world_size > 1
        # the monitored metric on the progress bar, the rest in the loggers
        self.log("val/set_f1", metrics.pop("val/set_f1"), prog_bar=True, sync_dist=sync)
        self.log_dict(metrics, sync_dist=sync)
        for row, scores in zip(outputs, result.per_passage):
            row["set_f1"] = scores["f1"]
        self.last_val_predictions = outputs
        self._val_outputs = []

    def _gather(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """All ranks' predictions, deduplicated by id (distributed samplers pad with repeats;
        the data readers guarantee unique ids, so no real pair is dropped)."""
        if self.trainer.world_size > 1 and torch.distributed.is_initialized():
            parts: list[Any] = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(parts, rows)
            rows = [r for part in parts for r in part]
        unique = {r["id"]: r for r in rows}
        return [unique[k] for k in sorted(unique)]

    def scorer(self) -> SetF1Scorer:
        """The set-F1 scorer, loaded once on first use, on this module's device."""
        if self._scorer is None:
            self._scorer = SetF1Scorer(**self.metric_cfg, device=self.device)
        elif self._scorer.device != self.device:
            self._scorer.to(self.device)
        return self._scorer

    def score_predictions(self, rows: Sequence[dict[str, Any]]) -> SetF1Result:
        """Set-F1 of generated strings against gold JSON targets; unparseable = empty set."""
        for row in rows:
            row["parsed"] = parse_prediction(row["prediction"])
        golds = [json.loads(r["target"]) for r in rows]
        return self.scorer().score([r["parsed"] for r in rows], golds)

    # ---- optimisation ------------------------------------------------------------------------
    def configure_optimizers(self) -> Any:
        h = self.hparams
        decay, no_decay = [], []
        for name, p in self.model.named_parameters():
            if p.requires_grad:
                (no_decay if p.ndim < 2 or "norm" in name.lower() else decay).append(p)
        optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": h.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=h.lr,
            betas=tuple(h.betas),
            eps=h.eps,
        )
        if h.scheduler == "constant":
            return optimizer
        if h.scheduler != "linear":
            raise ValueError(f"model.scheduler must be 'constant' or 'linear', got {h.scheduler!r}")
        from transformers import get_linear_schedule_with_warmup

        total = int(self.trainer.estimated_stepping_batches)
        schedule = get_linear_schedule_with_warmup(optimizer, int(h.warmup_ratio * total), total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    # ---- export ------------------------------------------------------------------------------
    def export_hf(self, out_dir: str | os.PathLike, **manifest: Any) -> Path:
        """`save_pretrained` model + tokenizer to `out_dir` (loads without densex), atomically."""
        out = Path(out_dir)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = mkdtemp(out.parent, prefix=f".{out.name}.")
        try:
            self.model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            n_params = sum(p.numel() for p in self.model.parameters())
            write_manifest(
                tmp / "manifest.json", kind="propositionizer", n_params=n_params, **manifest
            )
            _swap_dir(tmp, out)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(tmp)
            raise
        return out


def _swap_dir(new: Path, out: Path) -> None:
    """Put directory `new` at `out`: the old `out` is renamed aside first and deleted only
    after the swap, so a failure at any point leaves a complete export at `out` (the old one
    is moved back if the swap fails)."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
        os.replace(out, old)  # onto the empty placeholder directory
    try:
        os.replace(new, out)
    except BaseException:
        if old is not None:
            os.replace(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
