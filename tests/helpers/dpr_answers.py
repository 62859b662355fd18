"""pyserini's `has_answers` (DPR's answer matching), for checks that must not use densex's own.

`has_answers(text, answers, tokenizer, regex=False)` is pyserini's own where pyserini is
importable (`pyserini.eval.evaluate_dpr_retrieval`); otherwise a transcription, step for step,
of that module's `SimpleTokenizer` (DrQA's, as DPR ships it in `dpr/utils/tokenizers.py`),
`_normalize` (NFD), `regex_match` and `has_answers` (castorini/pyserini, Apache-2.0, file
`pyserini/eval/evaluate_dpr_retrieval.py`): the tokens are the regex's alphanumeric runs and
single non-space characters, matched lower-cased, an answer found where its tokens occur
contiguously in the text's. Only the parts `has_answers` reaches are kept (no annotators).
`SOURCE` says which one is in use.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import regex as _regex

__all__ = ["SOURCE", "SimpleTokenizer", "has_answers"]


class Tokens:
    """A class to represent a list of tokenized text."""

    TEXT = 0
    TEXT_WS = 1
    SPAN = 2

    def __init__(self, data: list[tuple[str, str, tuple[int, int]]], annotators: Any) -> None:
        self.data = data
        self.annotators = annotators

    def __len__(self) -> int:
        return len(self.data)

    def words(self, uncased: bool = False) -> list[str]:
        """Returns a list of the text of each token.

        Args:
            uncased: lower cases text
        """
        if uncased:
            return [t[self.TEXT].lower() for t in self.data]
        return [t[self.TEXT] for t in self.data]


class SimpleTokenizer:
    ALPHA_NUM = r"[\p{L}\p{N}\p{M}]+"
    NON_WS = r"[^\p{Z}\p{C}]"

    def __init__(self, **kwargs: Any) -> None:
        """
        Args:
            annotators: None or empty set (only tokenizes).
        """
        self._regexp = _regex.compile(
            "(%s)|(%s)" % (self.ALPHA_NUM, self.NON_WS),  # noqa: UP031 - pyserini's, verbatim
            flags=_regex.IGNORECASE + _regex.UNICODE + _regex.MULTILINE,
        )
        self.annotators: set[str] = set()

    def tokenize(self, text: str) -> Tokens:
        data = []
        matches = [m for m in self._regexp.finditer(text)]
        for i in range(len(matches)):
            # Get text
            token = matches[i].group()

            # Get whitespace
            span = matches[i].span()
            start_ws = span[0]
            if i + 1 < len(matches):  # noqa: SIM108 - pyserini's, verbatim
                end_ws = matches[i + 1].span()[0]
            else:
                end_ws = span[1]

            # Format data
            data.append((token, text[start_ws:end_ws], span))
        return Tokens(data, self.annotators)


def regex_match(text: str, pattern: str) -> bool:
    """Test if a regex pattern is contained within a text."""
    try:
        compiled = re.compile(pattern, flags=re.IGNORECASE + re.UNICODE + re.MULTILINE)
    except BaseException:  # noqa: BLE001 - as pyserini: a pattern that does not compile misses
        return False
    return compiled.search(text) is not None


def _normalize(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def _has_answers(text: str, answers: list[str], tokenizer: Any, regex: bool = False) -> bool:
    text = _normalize(text)
    if regex:
        for ans in answers:
            ans = _normalize(ans)
            if regex_match(text, ans):
                return True
    else:
        text = tokenizer.tokenize(text).words(uncased=True)
        for ans in answers:
            ans = _normalize(ans)
            ans = tokenizer.tokenize(ans).words(uncased=True)
            for i in range(0, len(text) - len(ans) + 1):
                if ans == text[i : i + len(ans)]:
                    return True
    return False


try:  # pyserini's own, where it is installed (it needs a JDK and ~40 packages)
    from pyserini.eval.evaluate_dpr_retrieval import (  # type: ignore[import-not-found]
        SimpleTokenizer,  # noqa: F811
        has_answers,
    )

    SOURCE = "pyserini"
except Exception:  # noqa: BLE001 - absent or broken: the transcription above
    has_answers = _has_answers
    SOURCE = "transcription of pyserini/eval/evaluate_dpr_retrieval.py"
