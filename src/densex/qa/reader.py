"""Retrieve-then-read: a seq2seq reader answers from the first l retrieved words.

The paper's reader is UnifiedQA-v2 T5-large, so the default input is UnifiedQA's own text
format (allenai/unifiedqa README, "Feeding data into UnifiedQA"): question first, then the
context, separated by the two characters backslash-n (not a newline), the whole string
pre-processed as in its `tasks.py` (lower-cased, outermost single quotes removed). Any other
seq2seq checkpoint works with a `{question}`/`{context}` template instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from densex.utils.generation import generate_sorted
from densex.utils.logging import get_logger
from densex.utils.models import resolve_dtype, resolve_model
from densex.utils.progress import Progress
from densex.utils.tiny_t5 import ensure_tiny_t5

log = get_logger(__name__)

UNIFIEDQA_SEPARATOR = " \\n "  # a literal backslash followed by "n"
_QUOTES = re.compile(r"'(.*)'")
_SPACE = re.compile(r"\s+")


def unifiedqa_input(question: str, context: str) -> str:
    """`"{question} \\n {context}"`, lower-cased with quotes stripped, as UnifiedQA was trained.

    Real newlines/tabs become spaces first (UnifiedQA's encode_datasets.py does the same), so
    the only separator the model sees is the literal backslash-n.
    """
    text = (
        _SPACE.sub(" ", question).strip() + UNIFIEDQA_SEPARATOR + _SPACE.sub(" ", context).strip()
    )
    return _QUOTES.sub(r"\1", text.lower())


class Reader:
    """Batched greedy generation with a Hugging Face seq2seq model (hub id or local path).

    Inputs are sorted by length so each batch pads little; `dtype: auto` is bf16 on a GPU
    that supports it (`densex.utils.models.resolve_dtype`), fp32 elsewhere.
    `max_input_tokens` defaults to 1024 rather than T5's 512 so a 500-word context (about
    700 T5 tokens) is not cut: T5's relative positions handle the longer input.
    """

    def __init__(
        self,
        model: str,
        name: str = "reader",
        input_format: str = "unifiedqa",
        max_input_tokens: int = 1024,
        max_new_tokens: int = 32,
        batch_size: int = 32,
        device: str = "auto",
        dtype: str = "auto",
    ) -> None:
        import torch
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        if input_format != "unifiedqa" and not (
            "{question}" in input_format and "{context}" in input_format
        ):
            raise ValueError(
                "reader.input_format must be 'unifiedqa' or a template with {question} and "
                f"{{context}}, got {input_format!r}"
            )
        self.name, self.input_format = name, input_format
        self.max_input_tokens, self.max_new_tokens = int(max_input_tokens), int(max_new_tokens)
        self.batch_size = int(batch_size)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.dtype = resolve_dtype(dtype, self.device)  # auto: bf16 on a bf16 GPU, else fp32
        self.model_path = resolve_model(str(model))
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.tokenizer.model_max_length = self.max_input_tokens
        self.model = AutoModelForSeq2SeqLM.from_pretrained(self.model_path, dtype=self.dtype).to(
            self.device
        )
        self.model.eval()

    def format_input(self, question: str, context: str) -> str:
        """The exact string given to the model for one question and its context."""
        if self.input_format == "unifiedqa":
            return unifiedqa_input(question, context)
        return self.input_format.format(question=question, context=context)

    def answer(self, questions: Sequence[str], contexts: Sequence[str]) -> list[str]:
        """One greedy answer per (question, context), in input order."""
        if len(questions) != len(contexts):
            raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts")
        inputs = [self.format_input(q, c) for q, c in zip(questions, contexts)]
        lengths = [len(ids) for ids in self.tokenizer(inputs)["input_ids"]]
        truncated = sum(n > self.max_input_tokens for n in lengths)
        if truncated:
            log.warning(
                "reader: %d of %d inputs longer than %d tokens were truncated",
                truncated,
                len(inputs),
                self.max_input_tokens,
            )
        with Progress("reader", len(inputs), "questions") as progress:
            texts, _ = generate_sorted(
                self.model,
                self.tokenizer,
                inputs,
                self.batch_size,
                self.max_new_tokens,
                lengths=lengths,
                on_batch=progress.advance,
                device=self.device,
            )
        answers = [text.strip() for text in texts]
        return answers


def tiny_reader(out_dir: str | os.PathLike, **kwargs: Any) -> Reader:
    """A `Reader` over a tiny random T5 built once in `out_dir` (tests and CPU smoke runs)."""

    out = ensure_tiny_t5(out_dir)  # built once, atomically (concurrent jobs: first one wins)
    kwargs.setdefault("name", "tiny")
    return Reader(model=str(out), **kwargs)
