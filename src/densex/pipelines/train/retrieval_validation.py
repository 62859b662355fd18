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
- `val/props_per_passage`, and `val/select`, the checkpoint rule: the mean of `val/ps_set_f1`,
  `val/R@1`/100 and `val/R@5`/100 (writing quality and retrieval at both depths; every part
  moves on [0, 1]).

Encoding uses the configured retriever (`retriever`: a `RetrieverSpec`'s fields, MiniLM by
default), an exact inner-product index and `retrieval.search.retrieve_passages`, as
`evaluate.py` does. The generated propositions of each run are written to `dirpath` as JSONL
(`{"id", "propositions"}`) beside the module's own validation predictions.

Runs with the module's weights as validation sees them: the callback must come before any
`WeightAveraging` callback (whose `on_validation_epoch_end` swaps the averaged weights out),
which `setup` checks.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import WeightAveraging

from densex.data.squad_articles import article_questions
from densex.metrics.answers import has_answer
from densex.propositionizer.module import parse_prediction
from densex.propositionizer.output import passage_source
from densex.propositionizer.pairs import split_source
from densex.propositionizer.resolve import SentenceSplitter
from densex.propositionizer.sentence_inputs import sentence_units
from densex.retrieval.encoders import build_retriever
from densex.retrieval.faiss_index import build_index
from densex.retrieval.search import retrieve_passages
from densex.retrieval.spec import RetrieverSpec
from densex.utils.io import write_jsonl
from densex.utils.logging import get_logger
from densex.utils.records import Record

log = get_logger(__name__)

__all__ = ["RetrievalValidation", "passage_recall"]

MINILM = {"name": "minilm", "backend": "sentence-transformers", "query_model": "packaged:minilm",
          "pooling": "st", "similarity": "cos"}  # fmt: skip


class _MatrixSearcher:
    """Exact inner-product search over `vectors` for queries encoded ahead (`qvec`, by text)."""

    def __init__(self, vectors: np.ndarray, qvec: dict[str, np.ndarray]) -> None:
        self.index, self.qvec = build_index(vectors), qvec

    @property
    def ntotal(self) -> int:
        return self.index.ntotal

    def search(self, queries: Sequence[str], n: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(np.stack([self.qvec[q] for q in queries]), n)


def passage_recall(
    unit_vectors: np.ndarray,
    unit_passages: Sequence[int],
    questions: Sequence[Record],
    qvec: dict[str, np.ndarray],
    passage_texts: Sequence[str],
    ks: Sequence[int],
) -> dict[int, float]:
    """Passage recall@k (percent) for each k of `ks`: a question counts at k when one of its
    top-k passages (ranked by their best unit, `retrieve_passages`) holds an answer."""
    searcher = _MatrixSearcher(np.ascontiguousarray(unit_vectors, dtype=np.float32), qvec)
    depth = max(ks)
    found = retrieve_passages(searcher, [q["question"] for q in questions], unit_passages, depth)
    first = []
    for q, r in zip(questions, found):
        hits = [has_answer(q["answers"], passage_texts[p]) for p in r.passage_rows.tolist()]
        first.append(hits.index(True) if True in hits else depth)
    ranks = np.asarray(first)
    return {k: float(100.0 * (ranks < k).mean()) if len(ranks) else 0.0 for k in ks}


class RetrievalValidation(pl.Callback):
    """Per-sentence generation + set-F1 + retrieval of the validation articles (module
    docstring). `squad_json` + `questions`: the SQuAD file that names each question's article
    and the questions JSONL; `limit_passages`: the first N validation passages only."""

    def __init__(
        self,
        squad_json: str,
        questions: str,
        context_sentences: int = 0,
        spacy_model: str | None = "en_core_web_lg",
        retriever: dict[str, Any] | None = None,
        ks: Sequence[int] = (1, 5, 20),
        batch_size: int = 32,
        max_source_length: int = 384,
        limit_passages: int | None = None,
        dirpath: str | os.PathLike | None = None,
        max_new_tokens: int = 192,
        decoding: dict[str, Any] | None = None,
    ) -> None:
        self.squad_json, self.questions_path = squad_json, questions
        self.context_sentences, self.spacy_model = context_sentences, spacy_model
        self.spec = RetrieverSpec(**{**MINILM, **dict(retriever or {})})
        self.ks, self.batch_size = tuple(int(k) for k in ks), batch_size
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
    def _prepare(self, trainer: pl.Trainer) -> dict[str, Any]:
        """Validation passages, their sentence units, questions, the retriever, query vectors
        and the sentences' recall: computed on the first validation run."""
        if self._fixed is not None:
            return self._fixed
        pairs = trainer.datamodule.val_pairs_all[: self.limit_passages]
        passages = [_passage_of(p) for p in pairs]
        split = SentenceSplitter(self.spacy_model)
        units, owners = sentence_units(passages, split.many, self.context_sentences)
        questions = article_questions(
            self.squad_json, self.questions_path, {p["title"] for p in passages}
        )
        retriever = build_retriever(self.spec)
        texts = [q["question"] for q in questions]
        qvec = dict(zip(texts, retriever.encode_queries(texts)))
        sentence_vectors = retriever.encode_units(units)
        texts = [p["text"] for p in passages]
        baseline = passage_recall(sentence_vectors, owners, questions, qvec, texts, self.ks)
        log.info(
            "retrieval validation: %d passages, %d sentences, %d questions; sentences R@%s %s",
            len(passages), len(units), len(questions), "/".join(map(str, self.ks)),
            " / ".join(f"{baseline[k]:.1f}" for k in self.ks),
        )  # fmt: skip
        self._fixed = {
            "pairs": pairs, "passages": passages, "units": units, "owners": owners,
            "questions": questions, "retriever": retriever, "qvec": qvec, "baseline": baseline,
        }  # fmt: skip
        return self._fixed

    # ---- each validation run ------------------------------------------------------------------
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        fixed = self._prepare(trainer)
        props = self._propositions(pl_module, fixed)
        metrics = self._score(pl_module, fixed, props)
        for name, value in metrics.items():
            pl_module.log(name, value, prog_bar=name == "val/select", rank_zero_only=True)
        log.info("retrieval validation: %s", ", ".join(f"{k}={v:.4f}" for k, v in metrics.items()))
        if self.dirpath is not None:
            name = f"epoch={trainer.current_epoch:03d}-step={trainer.global_step:06d}.jsonl"
            rows = [{"id": p["id"], "propositions": ps} for p, ps in zip(fixed["passages"], props)]
            write_jsonl(self.dirpath / name, rows)

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
        pl_module.train(was_training)
        props: list[list[str]] = [[] for _ in fixed["passages"]]
        for owner, out in zip(fixed["owners"], outputs):
            props[owner].extend(out or [])
        return props

    def _score(
        self, pl_module: Any, fixed: dict[str, Any], props: list[list[str]]
    ) -> dict[str, float]:
        """set-F1, recall@k of `props` and the sentences', and the selection score."""
        import json

        golds = [json.loads(p["target"]) for p in fixed["pairs"]]
        f1 = float(pl_module.scorer().score(props, golds).f1)
        flat = [{"text": t, "title": p["title"]} for p, ps in zip(fixed["passages"], props) for t in ps]  # fmt: skip
        owners = [i for i, ps in enumerate(props) for _ in ps]
        vectors = fixed["retriever"].encode_units(flat)
        texts = [p["text"] for p in fixed["passages"]]
        recall = passage_recall(vectors, owners, fixed["questions"], fixed["qvec"], texts, self.ks)
        metrics = {"val/ps_set_f1": f1}
        metrics |= {f"val/R@{k}": v for k, v in recall.items()}
        metrics |= {f"val/sentence_R@{k}": v for k, v in fixed["baseline"].items()}
        metrics["val/props_per_passage"] = sum(map(len, props)) / max(1, len(props))
        r1, r5 = recall.get(1, 0.0), recall.get(5, 0.0)
        metrics["val/select"] = (f1 + r1 / 100.0 + r5 / 100.0) / 3.0
        return metrics


def _passage_of(pair: Record) -> Record:
    """A passage record `{"id", "title", "section", "text"}` from a squad-open pair."""
    parts = split_source(pair["source"])
    if parts is None:
        raise ValueError(f"validation pair {pair['id']!r}: source is not a format_source string")
    title, section, text = parts
    return {"id": pair["id"], "title": title, "section": section, "text": text}
