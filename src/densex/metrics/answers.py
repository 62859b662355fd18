"""Answer matching, exactly as the field scores it.

- `has_answer`: DPR's retrieval judge (dpr/data/qa_validation.py). String mode: NFD-normalise,
  tokenise with DPR's `SimpleTokenizer`, and look for any answer as an uncased token
  subsequence of the text (`dpr_tokens`). Regex mode (CuratedTREC): search each pattern,
  case-insensitively, compiled by `compile_answer_pattern` (the pattern is NFD-normalised
  first, as in DPR: `P\\étain` becomes `P\\e` + U+0301, a bad escape, so such a pattern never
  matches — the loader counts and logs these).
- `normalize_answer` / `exact_match`: the SQuAD v1.1 EM used for the reader (lower, strip ASCII
  punctuation, drop a/an/the, squash whitespace).

Recall@k and EM@l are only comparable with published numbers if these match DPR/SQuAD token
for token, so the code follows the reference implementations line by line; the only
additions are caches (a passage is judged against thousands of questions).
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache

import regex

__all__ = [
    "SimpleTokenizer",
    "compile_answer_pattern",
    "dpr_tokens",
    "dpr_words",
    "exact_match",
    "has_answer",
    "normalize_answer",
    "regex_match",
]


class SimpleTokenizer:
    """DPR's (and DrQA's) SimpleTokenizer: runs of letters/digits/marks, or any other single
    non-space, non-control character. "1,000" -> ["1", ",", "000"]; "Obama's" -> ["Obama", "'", "s"].
    """

    ALPHA_NUM = r"[\p{L}\p{N}\p{M}]+"
    NON_WS = r"[^\p{Z}\p{C}]"

    def __init__(self) -> None:
        self._regexp = regex.compile(
            f"({self.ALPHA_NUM})|({self.NON_WS})",
            flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE,
        )

    def tokenize(self, text: str, uncased: bool = False) -> list[str]:
        """Token strings of `text` (lower-cased when `uncased`, as DPR's `words(uncased=True)`)."""
        tokens = [m.group() for m in self._regexp.finditer(text)]
        return [t.lower() for t in tokens] if uncased else tokens


_TOKENIZER = SimpleTokenizer()


def _nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def _tokenize(text: str) -> tuple[str, ...]:
    return tuple(_TOKENIZER.tokenize(_nfd(text), uncased=True))


# The tokenizer's two alternatives without capture groups, so `findall` returns the token strings
# themselves (one C call per text instead of a match object per token).
_WORDS = regex.compile(
    f"{SimpleTokenizer.ALPHA_NUM}|{SimpleTokenizer.NON_WS}",
    flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE,
)


def dpr_words(text: str) -> list[str]:
    """The tokens of `dpr_tokens` (NFD, `SimpleTokenizer`, each token lower-cased) for bulk
    use, not memoised: one `findall` per text instead of a match object per token.

    The text is lower-cased before tokenising, which gives the same tokens (no character
    changes category when lower-cased; tests check every code point), except where it holds a
    capital sigma: `str.lower` maps it by context ("ΑΣ.Β" -> "ασ.β", the token "ΑΣ" -> "ας"), so
    such a text is tokenised first, as DPR does."""
    text = _nfd(text)
    if "\u03a3" in text:
        return [w.lower() for w in _WORDS.findall(text)]
    return _WORDS.findall(text.lower())


@lru_cache(maxsize=1 << 18)
def dpr_tokens(text: str) -> tuple[str, ...]:
    """DPR's match tokens of a short string (an answer, a word): NFD, `SimpleTokenizer`,
    uncased. Memoised: answers and words repeat across thousands of passages and questions."""
    return _tokenize(text)


@lru_cache(maxsize=1 << 16)
def _text_tokens(text: str) -> tuple[str, ...]:
    """`dpr_tokens` of a passage; a smaller cache, since passages are long."""
    return _tokenize(text)


_REGEX_FLAGS = regex.IGNORECASE | regex.UNICODE | regex.MULTILINE


def compile_answer_pattern(pattern: str) -> regex.Pattern:
    """A regex answer exactly as DPR's `regex_match` compiles it: NFD-normalised, with
    IGNORECASE | UNICODE | MULTILINE. Raises `regex.error` where DPR's compile fails (and DPR
    then scores the pattern as never matching)."""
    return regex.compile(_nfd(pattern), flags=_REGEX_FLAGS)


@lru_cache(maxsize=1 << 12)
def _compile(pattern: str) -> regex.Pattern | None:
    try:
        return compile_answer_pattern(pattern)
    except regex.error:
        return None


def regex_match(text: str, pattern: str) -> bool:
    """True if `pattern` occurs in `text`; an invalid pattern never matches (as in DPR)."""
    compiled = _compile(pattern)
    return compiled is not None and compiled.search(_nfd(text)) is not None


def _contains(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    n = len(needle)
    first = needle[0]
    return any(
        haystack[i] == first and tuple(haystack[i : i + n]) == tuple(needle)
        for i in range(len(haystack) - n + 1)
    )


def has_answer(answers: Iterable[str], text: str, match_type: str = "string") -> bool:
    """DPR's has_answer: does `text` contain any of `answers`?

    One deliberate difference: an answer with no tokens (e.g. "" or "...") is ignored, where
    DPR's loop would match it everywhere; the loaders reject such answers anyway.
    """
    if match_type == "string":
        tokens = _text_tokens(text)
        for answer in answers:
            needle = dpr_tokens(answer)
            if needle and _contains(tokens, needle):
                return True
        return False
    if match_type == "regex":
        return any(regex_match(text, pattern) for pattern in answers)
    raise ValueError(f"match_type must be 'string' or 'regex', got {match_type!r}")


_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")  # stdlib re, as SQuAD's script


def normalize_answer(s: str) -> str:
    """SQuAD v1.1 normalisation: lower, drop ASCII punctuation, drop a/an/the, squash spaces."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(prediction: str, answers: Iterable[str]) -> bool:
    """SQuAD EM: the normalised prediction equals any normalised gold answer."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(a) for a in answers)
