"""Flan-T5 propositionizer as a LightningModule, validated by BERTScore set-F1.

Training is plain teacher-forced cross-entropy on ``source -> JSON list of propositions``.
Validation also generates greedily for every validation passage, parses the JSON and scores
the predicted set against the gold set with set-F1 (`densex.metrics.set_f1`), which is what
the checkpoint callback selects on (``val/set_f1``, max).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from densex.metrics.set_f1 import SetF1Result, SetF1Scorer
from densex.propositionizer.backbone import (
    checked_config_overrides,
    corrupt_decoder_inputs,
    load_seq2seq,
    output_decoder,
    token_nll,
)
from densex.propositionizer.export import export_hf
from densex.propositionizer.parse import parse_propositions
from densex.utils.logging import get_logger
from densex.utils.models import resolve_model
from densex.utils.tiny_t5 import cached_tiny_t5

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

    return str(cached_tiny_t5(cache_dir, texts, **dict(tiny or {})))


def linear_warmup_schedule(
    optimizer: torch.optim.Optimizer, num_training_steps: int, warmup_ratio: float = 0.0
) -> torch.optim.lr_scheduler.LambdaLR:
    """Warm-up over `warmup_ratio` of `num_training_steps`, then linear decay to 0
    (`conf/model/scheduler/linear.yaml`)."""
    from transformers import get_linear_schedule_with_warmup

    warmup = int(warmup_ratio * num_training_steps)
    return get_linear_schedule_with_warmup(optimizer, warmup, num_training_steps)


def set_dropout(model: torch.nn.Module, p: float) -> None:
    """Every dropout of `model` to `p`: `nn.Dropout` modules and the float rates attention
    layers keep as attributes (T5Attention.dropout), which `nn.Dropout` alone would miss."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = p
        elif isinstance(getattr(m, "dropout", None), float):
            m.dropout = p
    if hasattr(model.config, "dropout_rate"):
        model.config.dropout_rate = p


class PropositionizerModule(pl.LightningModule):
    """Seq2seq fine-tuning; `optimizer`/`scheduler` are the composed `_partial_` factories
    (`conf/model/optimizer/adamw.yaml`: the paper's AdamW, lr 1e-4, weight decay 1e-4).

    `batch_size` (effective) and `per_device_batch_size` are recorded here; the pipeline turns
    them into the data loader batch size and `accumulate_grad_batches`. `metric` configures
    the set-F1 backbone (`SetF1Scorer` arguments). `decoder_input_dropout` masks that share of
    the teacher-forced decoder inputs in training (`backbone.corrupt_decoder_inputs`).
    `config_overrides` set existing attributes of the loaded model's config (e.g. the copy
    student's `coverage_loss`; they travel with the export; an unknown key is an error).
    `tiny` and `warm_start` are the build specs the pipeline used to make `name_or_path`
    (recorded, not used here). `generate_on_validation: false` makes validation the loss
    only (a callback that generates its own way, e.g. per sentence, scores the model).
    """

    def __init__(
        self,
        name_or_path: str,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., Any] | None = None,
        max_new_tokens: int = 512,
        num_beams: int = 1,
        max_source_length: int = 512,
        batch_size: int = 64,
        per_device_batch_size: int = 8,
        gradient_checkpointing: bool = False,
        dropout: float | None = None,
        metric: dict[str, Any] | None = None,
        tiny: dict[str, Any] | None = None,
        warm_start: dict[str, Any] | None = None,
        decoder_input_dropout: float = 0.0,
        config_overrides: dict[str, Any] | None = None,
        generate_on_validation: bool = True,
    ) -> None:
        super().__init__()
        from transformers import AutoTokenizer

        # the factories stay out of the checkpoint (loaded with weights_only=True on resume);
        # their settings are in the run's logged config
        self.save_hyperparameters(ignore=["optimizer", "scheduler"])
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        path = resolve_model(name_or_path)
        # from_pretrained returns eval mode (dropout off); Lightning keeps submodule modes
        self.model = load_seq2seq(path, **checked_config_overrides(path, config_overrides))
        self.model.train()
        self.tokenizer = AutoTokenizer.from_pretrained(path, model_max_length=max_source_length)
        if dropout is not None:  # e.g. 0 for overfitting checks; None keeps the model's own
            set_dropout(self.model, dropout)
        if gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.metric_cfg = {**DEFAULT_METRIC, **dict(metric or {})}
        self._scorer: SetF1Scorer | None = None
        self._val_outputs: list[dict[str, Any]] = []
        self._window_tokens = 0
        self.last_val_predictions: list[dict[str, Any]] = []

    # ---- training ----------------------------------------------------------------------------
    def forward(self, input_ids, attention_mask, labels=None):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        """Summed token cross-entropy of the micro-batch; `on_before_optimizer_step` divides
        the accumulated gradient by the window's label-token count over all ranks, so the
        update is the token-weighted mean whatever the accumulation and world size."""
        rate = self.hparams.get("decoder_input_dropout", 0.0)
        if rate > 0:
            dec = corrupt_decoder_inputs(self.model, self.tokenizer, batch["labels"], rate)
            out = self.model(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                decoder_input_ids=dec,
                labels=batch["labels"],
            )
        else:
            out = self(batch["input_ids"], batch["attention_mask"], batch["labels"])
        n_tokens = (batch["labels"] != -100).sum()
        loss_sum = out.loss * n_tokens  # the model's loss is the token mean of this micro-batch
        self._window_tokens += int(n_tokens)
        n = batch["input_ids"].shape[0]
        kw = {"on_step": True, "on_epoch": True, "prog_bar": True, "sync_dist": True}
        self.log("train/loss", out.loss.detach(), batch_size=n, **kw)
        for part in ("nll", "coverage"):  # a loss's parts, where the model reports them
            if getattr(out, part, None) is not None:
                self.log(f"train/{part}", getattr(out, part), on_step=True, batch_size=n)
        tokens = batch["attention_mask"].sum() + n_tokens
        self.log("train/tokens", tokens.float(), on_step=True, on_epoch=False, reduce_fx="sum")
        return loss_sum

    def on_train_epoch_start(self) -> None:
        self._window_tokens = 0

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Lightning divided each micro-batch's summed loss by `accumulate_grad_batches` and
        DDP averaged over ranks; rescale to sum-over-all-tokens / all tokens (HF Trainer's
        `num_items_in_batch` rule). Runs before gradient clipping."""
        total = torch.tensor(float(self._window_tokens), device=self.device)
        world = self.trainer.world_size
        if world > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(total)
        scale = self.trainer.accumulate_grad_batches * world / max(float(total), 1.0)
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(scale)
        self._window_tokens = 0

    # ---- validation --------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, sources: list[str], **decoding: Any) -> list[str]:  # fmt: skip
        """Greedy (or beam, if configured) decoding of the JSON proposition list (`sources`:
        the texts of `input_ids`, for a decoder that copies their surface forms); `decoding`
        overrides the configured `max_new_tokens` / `num_beams` or adds the model's rules."""
        h = self.hparams
        decoding = {"max_new_tokens": h.max_new_tokens, "num_beams": h.num_beams, **decoding}
        out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False, **decoding)  # fmt: skip
        decode = output_decoder(self.tokenizer)  # None: the tokenizer's own batch_decode
        if decode is not None:
            return decode(out, sources)
        return self.tokenizer.batch_decode(out, skip_special_tokens=True)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        out = self(batch["input_ids"], batch["attention_mask"], batch["labels"])
        n = batch["input_ids"].shape[0]
        self.log(
            "val/loss", token_nll(out), on_epoch=True, prog_bar=True, batch_size=n, sync_dist=True
        )
        if getattr(out, "coverage", None) is not None:
            self.log("val/coverage", out.coverage, on_epoch=True, batch_size=n, sync_dist=True)
        if self.trainer.sanity_checking or not self.hparams.get("generate_on_validation", True):
            return  # loss only (sanity checks: no need to load the metric model)
        for pid, pred, gold in zip(
            batch["id"],
            self.generate(batch["input_ids"], batch["attention_mask"], batch["source"]),
            batch["target"],
        ):
            self._val_outputs.append({"id": pid, "prediction": pred, "target": gold})

    def on_validation_epoch_start(self) -> None:
        self._val_outputs = []

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking or (not self._val_outputs and self.trainer.world_size == 1):
            return
        # set-F1 is computed once, on rank 0, over all ranks' gathered predictions; the other
        # ranks receive the numbers (every rank must log the same value for checkpointing)
        outputs = self._gather(self._val_outputs)
        metrics, per_passage = {}, []
        if self.trainer.is_global_zero:
            result = self.score_predictions(outputs)
            metrics, per_passage = result.as_dict("val/"), [s["f1"] for s in result.per_passage]
        if self.trainer.world_size > 1:
            metrics, per_passage = self.trainer.strategy.broadcast((metrics, per_passage), src=0)
        metrics = {k: float(v) for k, v in metrics.items()}
        if "val/set_f1" in metrics:  # the monitored metric on the progress bar, the rest logged
            self.log("val/set_f1", metrics.pop("val/set_f1"), prog_bar=True, sync_dist=False)
        self.log_dict(metrics, sync_dist=False)
        for row, f1 in zip(outputs, per_passage):
            row["set_f1"] = f1
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
        """The composed optimizer (`model/optimizer`) over two groups, weights with its weight
        decay and biases/norms without; with a `model/scheduler`, stepped every optimizer step."""
        if self.optimizer_factory is None:
            raise ValueError("no optimizer: compose one (conf/model/optimizer) or pass a factory")
        decay, no_decay = [], []
        for name, p in self.model.named_parameters():
            if p.requires_grad:
                (no_decay if p.ndim < 2 or "norm" in name.lower() else decay).append(p)
        optimizer = self.optimizer_factory(
            [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]
        )
        if self.scheduler_factory is None:
            return optimizer
        total = int(self.trainer.estimated_stepping_batches)
        schedule = self.scheduler_factory(optimizer, num_training_steps=total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    # ---- export ------------------------------------------------------------------------------
    def export_hf(self, out_dir: str | os.PathLike, **manifest: Any) -> Path:
        """`save_pretrained` model + tokenizer to `out_dir` (loads without densex), atomically
        (`export.export_hf`)."""
        return export_hf(self.model, self.tokenizer, out_dir, **manifest)
