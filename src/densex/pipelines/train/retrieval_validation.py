"""Retrieval in the propositionizer's validation loop (`RetrievalValidation`).

At the end of every validation run the model writes the propositions of the validation
articles' passages the way it will be used (`propositionizer.per_sentence`: one input per
sentence, with `context_sentences` earlier sentences as read-only context, greedy with the
`decoding` rules given, e.g. the copy student's `no_repeat_proposition` and `coverage_penalty`,
at most `max_new_tokens` a sentence; an output that does not parse falls back on its
sentence), and the callback logs

- `val/ps_set_f1`: their set-F1 per passage against the teacher's propositions;
- `val/R@k` (k in `ks`): passage recall@k (DPR has_answer on the passage text, passage score
  = max over its units) of the validation articles' SQuAD questions over those propositions,
  beside `val/sentence_R@k` over the same passages' sentences (computed once);
- `val/AR@{answer_words}`: answer recall within the first `answer_words` retrieved words on
  the questions whose shortest answer has at most 5 words (`sources.SHORT_ANSWER_WORDS`), and
  `val/AR@{answer_words}_all` on every question, beside the sentences' (`validation_metrics`);
- `val/R@1_diff`, `val/R@5_diff`, `val/AR@{answer_words}_diff` (propositions minus sentences,
  points) and their paired randomization p-values `..._p` (`analysis.significance`; the
  bootstrap CIs go to the JSON file below);
- `val/props_per_passage`, and `val/select`, the checkpoint rule: the mean of `val/ps_set_f1`,
  `val/R@1`/100 and `val/R@5`/100 (writing quality and retrieval at both depths; every part
  moves on [0, 1]).

The questions are those of the validation articles in every source with a SQuAD JSON and a
questions file (`sources`: `data.sources`, or one `squad_json` + `questions` pair;
`propositionizer.sources.source_questions`, percent-encoded SQuAD titles decoded).
Encoding uses the configured retriever (`retriever`: a `RetrieverSpec`'s fields, MiniLM by
default), an exact inner-product index and `retrieval.search.retrieve_passages`, as
`evaluate.py` does. The generated propositions of each run are written to `dirpath` as JSONL
(`{"id", "propositions"}`), and its metrics with the paired tests as `<same name>.json`.

Runs with the module's weights as validation sees them: the callback must come before any
`WeightAveraging` callback (whose `on_validation_epoch_end` swaps the averaged weights out),
which `setup` checks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import WeightAveraging

from densex.analysis.significance import N_RESAMPLES
from densex.pipelines.train.sources import pair_sources
from densex.pipelines.train.validation_metrics import (
    QuestionScores,
    paired_tests,
    question_scores,
    recall_metrics,
)
from densex.propositionizer.module import parse_prediction
from densex.propositionizer.output import passage_source
from densex.propositionizer.pairs import split_source
from densex.propositionizer.resolve import SentenceSplitter
from densex.propositionizer.sentence_inputs import sentence_units
from densex.propositionizer.sources import source_questions
from densex.retrieval.encoders import build_retriever
from densex.retrieval.spec import RetrieverSpec
from densex.utils.io import write_json, write_jsonl
from densex.utils.logging import get_logger
from densex.utils.progress import Progress
from densex.utils.records import Record

log = get_logger(__name__)

__all__ = ["RetrievalValidation"]

MINILM = {"name": "minilm", "backend": "sentence-transformers", "query_model": "packaged:minilm",
          "pooling": "st", "similarity": "cos"}  # fmt: skip


class RetrievalValidation(pl.Callback):
    """Per-sentence generation + set-F1 + retrieval of the validation articles (module
    docstring). `sources`: `data.sources` (mappings or `PairSource`s; those with a
    `squad_json` and `questions` give the validation articles their questions);
    `answer_words`: the l of answer recall within l words; `n_resamples`: of the paired tests;
    `limit_passages`: the first N validation passages only."""

    def __init__(
        self,
        sources: Sequence[Any],
        context_sentences: int = 0,
        spacy_model: str | None = "en_core_web_lg",
        retriever: dict[str, Any] | None = None,
        ks: Sequence[int] = (1, 5, 20),
        answer_words: int = 100,
        batch_size: int = 32,
        max_source_length: int = 384,
        limit_passages: int | None = None,
        dirpath: str | os.PathLike | None = None,
        max_new_tokens: int = 192,
        decoding: dict[str, Any] | None = None,
        n_resamples: int = N_RESAMPLES,
    ) -> None:
        self.sources = pair_sources(sources) or []
        if not any(s.squad_json and s.questions for s in self.sources):
            raise ValueError("retrieval validation: no source with a squad_json and questions")
        self.context_sentences, self.spacy_model = context_sentences, spacy_model
        self.spec = RetrieverSpec(**{**MINILM, **dict(retriever or {})})
        self.ks, self.answer_words = tuple(int(k) for k in ks), int(answer_words)
        self.batch_size, self.n_resamples = batch_size, n_resamples
        self.max_source_length, self.limit_passages = max_source_length, limit_passages
        self.dirpath = Path(dirpath) if dirpath else None
        self.max_new_tokens, self.decoding = max_new_tokens, dict(decoding or {})
        self._fixed: dict[str, Any] | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        order = trainer.callbacks
        averaging = [i for i, c in enumerate(order) if isinstance(c, WeightAveraging)]
        if averaging and averaging[0] < order.index(self):
            raise ValueError(
                "callbacks: list the retrieval validation before the weight averaging (ema), "
                "or it would score the raw weights instead of the averaged ones"
            )

    # ---- what does not change between validation runs -----------------------------------------
    def questions(self, titles: Sequence[str] | set[str]) -> list[Record]:
        """The questions of the articles `titles` from every source (`short` marked)."""
        return source_questions(self.sources, titles)

    def prepare(self, pairs: Sequence[Record]) -> dict[str, Any]:
        """Validation passages of `pairs`, their sentence units, questions, the retriever,
        query vectors and the sentences' per-question scores: computed once."""
        passages = [_passage_of(p) for p in pairs]
        split = SentenceSplitter(self.spacy_model)
        units, owners = sentence_units(passages, split.many, self.context_sentences)
        questions = self.questions({p["title"] for p in passages})
        retriever = build_retriever(self.spec)
        texts = [q["question"] for q in questions]
        fixed = {
            "pairs": pairs, "passages": passages, "questions": questions, "retriever": retriever,
            "qvec": dict(zip(texts, retriever.encode_queries(texts))),
            "short": np.array([bool(q["short"]) for q in questions], dtype=bool),
        }  # fmt: skip
        vectors = retriever.encode_units(units)
        fixed["sentences"] = self._scores(fixed, vectors, (owners, [u["text"] for u in units]))
        baseline = recall_metrics(fixed["sentences"], fixed["short"], self.ks, "val/sentence_")
        fixed.update(units=units, owners=owners, baseline=baseline)
        shown = ", ".join(f"{k.removeprefix('val/sentence_')} {v:.1f}" for k, v in baseline.items())
        log.info(
            "retrieval validation: %d passages, %d sentences, %d questions (%d short); sentences %s",
            len(passages), len(units), len(questions), int(fixed["short"].sum()), shown,
        )  # fmt: skip
        return fixed

    def _scores(
        self, fixed: dict[str, Any], vectors: np.ndarray, units: tuple[list[int], list[str]]
    ) -> QuestionScores:
        """`validation_metrics.question_scores` of the fixed questions over `units`."""
        texts = [p["text"] for p in fixed["passages"]]
        depth = max(self.ks)
        return question_scores(vectors, units, fixed["questions"], fixed["qvec"], texts, depth,
                               self.answer_words)  # fmt: skip

    # ---- each validation run ------------------------------------------------------------------
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        if self._fixed is None:
            self._fixed = self.prepare(trainer.datamodule.val_pairs_all[: self.limit_passages])
        fixed = self._fixed
        props = self._propositions(pl_module, fixed)
        metrics, tests = self._score(pl_module, fixed, props)
        for name, value in metrics.items():
            pl_module.log(name, value, prog_bar=name == "val/select", rank_zero_only=True)
        log.info("retrieval validation: %s", ", ".join(f"{k}={v:.4f}" for k, v in metrics.items()))
        if self.dirpath is not None:
            name = f"epoch={trainer.current_epoch:03d}-step={trainer.global_step:06d}"
            rows = [{"id": p["id"], "propositions": ps} for p, ps in zip(fixed["passages"], props)]
            write_jsonl(self.dirpath / f"{name}.jsonl", rows)
            counts = {"questions": len(fixed["short"]), "short": int(fixed["short"].sum())}
            record = {"metrics": metrics, "paired_tests": tests, **counts}
            write_json(self.dirpath / f"{name}.json", record)

    @torch.no_grad()
    def _propositions(self, pl_module: Any, fixed: dict[str, Any]) -> list[list[str]]:
        """Each passage's propositions: its sentences' parsed outputs (or the sentence) in
        order, generated in length-sorted batches."""
        units = fixed["units"]
        sources = [passage_source(u) for u in units]
        tok = pl_module.tokenizer
        lengths = [len(x) for x in tok(sources, truncation=True, max_length=self.max_source_length)["input_ids"]]  # fmt: skip
        order = sorted(range(len(units)), key=lambda i: -lengths[i])
        outputs: list[list[str] | None] = [None] * len(units)
        was_training = pl_module.training
        pl_module.eval()
        with Progress("validation propositions", total=len(order), unit="sentences") as bar:
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                batch = tok([sources[i] for i in chunk], padding=True, truncation=True,
                            max_length=self.max_source_length, return_tensors="pt").to(pl_module.device)  # fmt: skip
                texts = pl_module.generate(
                    batch["input_ids"], batch["attention_mask"], [sources[i] for i in chunk],
                    max_new_tokens=self.max_new_tokens, num_beams=1, **self.decoding,
                )  # fmt: skip
                for i, text in zip(chunk, texts):
                    outputs[i] = parse_prediction(text) or [units[i]["text"]]
                bar.advance(len(chunk))
        pl_module.train(was_training)
        props: list[list[str]] = [[] for _ in fixed["passages"]]
        for owner, out in zip(fixed["owners"], outputs):
            props[owner].extend(out or [])
        return props

    def _score(
        self, pl_module: Any, fixed: dict[str, Any], props: list[list[str]]
    ) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
        """(metrics, paired tests): set-F1, recall and answer recall of `props` beside the
        sentences', the paired differences and p-values, and the selection score."""
        golds = [json.loads(p["target"]) for p in fixed["pairs"]]
        f1 = float(pl_module.scorer().score(props, golds).f1)
        flat = [{"text": t, "title": p["title"]} for p, ps in zip(fixed["passages"], props) for t in ps]  # fmt: skip
        owners = [i for i, ps in enumerate(props) for _ in ps]
        vectors = fixed["retriever"].encode_units(flat)
        scores = self._scores(fixed, vectors, (owners, [u["text"] for u in flat]))
        recall = recall_metrics(scores, fixed["short"], self.ks, "val/")
        tests = paired_tests(scores, fixed["sentences"], fixed["short"], self.n_resamples)
        metrics = {"val/ps_set_f1": f1, **recall, **fixed["baseline"]}
        for name, test in tests.items():
            metrics |= {f"val/{name}_diff": test["diff"], f"val/{name}_p": test["p_randomization"]}
        metrics["val/props_per_passage"] = sum(map(len, props)) / max(1, len(props))
        r1, r5 = recall.get("val/R@1", 0.0), recall.get("val/R@5", 0.0)
        metrics["val/select"] = (f1 + r1 / 100.0 + r5 / 100.0) / 3.0
        return metrics, tests


def _passage_of(pair: Record) -> Record:
    """A passage record `{"id", "title", "section", "text"}` from a squad-open pair."""
    parts = split_source(pair["source"])
    if parts is None:
        raise ValueError(f"validation pair {pair['id']!r}: source is not a format_source string")
    title, section, text = parts
    return {"id": pair["id"], "title": title, "section": section, "text": text}
