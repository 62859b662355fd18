"""Word-budget metrics on the questions with a short answer: the one key rule and the mask.

Answer recall within l words and EM@l look for the answer in the retrieved units' own text, so
a question whose answer is a clause (SQuAD train: one answer per question, often a clause)
counts against short units that hold the fact but not the clause. With `dataset.short_answer_words:
N`, each is also computed on the questions whose shortest answer has at most N whitespace words
(`short_answer_mask`, by `data.squad_articles.is_short_answer`), under the metric's own key
with `_short<N>` after it: `answer_recall@100_short5` in `results.jsonl`, `ar@100_short5` /
`em@100_short5` as per-question metrics of the paired tests (`analysis.per_question`), shown as
`AR@100 (≤5-word answers)` (`report.naming`). The subset metric is the plain metric's code run on
the masked questions, nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from densex.data.squad_articles import is_short_answer

__all__ = ["short_answer_mask", "short_key", "split_short_key"]

_SHORT = re.compile(r"^(?P<metric>.+)_short(?P<words>[1-9]\d*)$")


def short_key(metric: str, words: int) -> str:
    """`metric`'s key on the questions with a shortest answer of at most `words` words."""
    return f"{metric}_short{int(words)}"


def split_short_key(key: str) -> tuple[str, int | None]:
    """`(metric, N)` of a `short_key`; `(key, None)` for any other key."""
    m = _SHORT.match(str(key))
    return (m["metric"], int(m["words"])) if m else (str(key), None)


def short_answer_mask(answers: Sequence[Sequence[str]], words: int) -> np.ndarray:
    """Per question (its answer strings), whether its shortest answer has 1..`words` words."""
    return np.array([is_short_answer(a, words) for a in answers], dtype=bool)
