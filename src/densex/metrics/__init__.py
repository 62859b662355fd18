"""Evaluation metrics: DPR answer matching, SQuAD EM (`answers`), proposition set-F1 (`set_f1`)."""

from densex.metrics.answers import (
    SimpleTokenizer,
    exact_match,
    has_answer,
    normalize_answer,
    regex_match,
)

__all__ = ["SimpleTokenizer", "exact_match", "has_answer", "normalize_answer", "regex_match"]
