"""DPR has_answer (string + regex) and SQuAD EM, checked against the reference behaviour."""

from __future__ import annotations

import json
import unicodedata

import pytest
import regex
from hypothesis import given
from hypothesis import strategies as st

from densex.metrics.answers import (
    SimpleTokenizer,
    compile_answer_pattern,
    dpr_tokens,
    exact_match,
    has_answer,
    normalize_answer,
    regex_match,
)

TOK = SimpleTokenizer()


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("1,000", ["1", ",", "000"]),
        ("Obama's", ["obama", "'", "s"]),
        ("U.S. $12.5bn", ["u", ".", "s", ".", "$", "12", ".", "5bn"]),
        ("  tabs\tand\nnew-lines ", ["tabs", "and", "new", "-", "lines"]),
        ("24–10", ["24", "–", "10"]),
    ],
)
def test_simple_tokenizer_matches_dpr(text: str, tokens: list[str]) -> None:
    assert TOK.tokenize(text, uncased=True) == tokens


def test_tokenizer_keeps_case_unless_uncased() -> None:
    assert TOK.tokenize("Obama's") == ["Obama", "'", "s"]


def test_string_match_is_a_token_subsequence() -> None:
    assert has_answer(["Barack Obama"], "President barack OBAMA spoke.")
    assert not has_answer(["Obama"], "The Obamacare debate")  # no partial tokens
    assert has_answer(["1,000"], "about 1 , 000 people")  # same tokens
    assert not has_answer(["1000"], "about 1,000 people")
    assert has_answer(["Obama's"], "it was Obama ' s plan")
    assert has_answer(["nope", "plan"], "it was Obama's plan")  # any answer


def test_accents_match_in_composed_and_decomposed_forms() -> None:
    composed = "Wilhelm Conrad R\u00f6ntgen won the first prize."
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    for answer in ("R\u00f6ntgen", "Ro\u0308ntgen"):
        assert has_answer([answer], composed)
        assert has_answer([answer], decomposed)
    # NFD keeps the combining mark inside the token (\p{M}): no accent-insensitive match
    assert not has_answer(["Rontgen"], composed)


def test_regex_mode_curated_trec() -> None:
    feet = r"\b2,?[4567][0-9][0-9]\b"
    assert has_answer([feet], "Jerusalem lies 2,550 feet above sea level", "regex")
    assert not has_answer([feet], "about 200 feet", "regex")
    assert has_answer(["After the Fall|Finishing the Play"], "AFTER THE FALL (1964)", "regex")
    # string mode would not read the pattern as a regex
    assert not has_answer(["After the Fall|Finishing the Play"], "after the fall", "string")
    assert not regex_match("anything", "(unclosed")  # invalid pattern never matches, as DPR
    assert has_answer(["R\u00f6ntgen"], unicodedata.normalize("NFD", "R\u00f6ntgen"), "regex")


@pytest.mark.parametrize(
    "pattern",
    [
        "Sne[zž]ka|Sn\\ě\\žka",
        "Laval|Petain|Marshal Philippe P\\étain",
        "Robert Wadlow|Sultan K\\ösen",
    ],
)
def test_patterns_broken_by_nfd_never_match_as_in_dpr(pattern: str) -> None:
    """CuratedTREC patterns that compile as written but not NFD-normalised (as DPR compiles
    them): `compile_answer_pattern` raises, and so no alternative of theirs ever matches."""
    regex.compile(pattern)  # fine as written
    with pytest.raises(regex.error, match="bad escape"):
        compile_answer_pattern(pattern)
    for text in ("Snezka", "Marshal Petain", "Robert Wadlow", pattern):
        assert not regex_match(text, pattern)
        assert not has_answer([pattern], text, "regex")


def test_compile_answer_pattern_is_what_scoring_uses() -> None:
    compiled = compile_answer_pattern("R\u00f6ntgen|\\bcurie\\b")
    assert compiled.pattern == unicodedata.normalize("NFD", "R\u00f6ntgen|\\bcurie\\b")
    assert compiled.flags & regex.IGNORECASE and compiled.flags & regex.MULTILINE
    assert compiled.search(unicodedata.normalize("NFD", "RÖNTGEN"))
    assert compiled.search("x\nMarie CURIE")


def test_dpr_tokens_are_nfd_uncased_and_memoised() -> None:
    assert dpr_tokens("Beyonc\u00e9's 1,000") == tuple(
        TOK.tokenize(unicodedata.normalize("NFD", "Beyonc\u00e9's 1,000"), uncased=True)
    )
    assert dpr_tokens("Beyonc\u00e9") == dpr_tokens("beyonce\u0301")
    hits = dpr_tokens.cache_info().hits
    dpr_tokens("Beyonc\u00e9's 1,000")
    assert dpr_tokens.cache_info().hits == hits + 1
    assert isinstance(dpr_tokens("x"), tuple)  # immutable: safe to share from the cache


def test_bad_match_type_and_empty_answers() -> None:
    with pytest.raises(ValueError, match="match_type"):
        has_answer(["x"], "x", "fuzzy")
    # DPR would match a token-less answer everywhere; we ignore it
    assert not has_answer(["", "   "], "some text")


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("The Beatles!", "beatles"),
        ("An-the", "anthe"),
        ("  a   cat  sat ", "cat sat"),
        ("Theory of the Case", "theory of case"),
        ("24–10", "24–10"),  # non-ASCII punctuation is kept, as in SQuAD's script
        ("$1,000.", "1000"),
    ],
)
def test_squad_normalize_answer(raw: str, norm: str) -> None:
    assert normalize_answer(raw) == norm


def test_exact_match() -> None:
    assert exact_match("the Beatles", ["Rolling Stones", "Beatles."])
    assert not exact_match("Beatles band", ["Beatles"])
    assert not exact_match("anything", [])


# DPR's has_answer (dpr/data/qa_validation.py) as the oracle, written the reference way.
_DPR_RE = regex.compile(
    r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])",
    flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE,
)


def _dpr_has_answer(answers: list[str], text: str) -> bool:
    words = [m.group().lower() for m in _DPR_RE.finditer(unicodedata.normalize("NFD", text))]
    for a in answers:
        aw = [m.group().lower() for m in _DPR_RE.finditer(unicodedata.normalize("NFD", a))]
        for i in range(0, len(words) - len(aw) + 1):
            if aw == words[i : i + len(aw)]:
                return True
    return False


_ALPHABET = st.sampled_from(list("abAB ö\u0308é,.'-1 2\t") + ["o\u0308", "the "])


@given(
    text=st.lists(_ALPHABET, max_size=40).map("".join),
    answers=st.lists(
        st.lists(_ALPHABET, min_size=1, max_size=6).map("".join), min_size=1, max_size=3
    ),
)
def test_has_answer_agrees_with_dpr_reference(text: str, answers: list[str]) -> None:
    answers = [a for a in answers if TOK.tokenize(a)]  # token-less answers: documented difference
    assert has_answer(answers, text) == _dpr_has_answer(answers, text)


def test_squad_answers_are_found_in_their_paragraphs(squad_open) -> None:
    """Real data: SQuAD answers are spans of their paragraph, so DPR's matcher finds nearly all
    (misses are spans cut inside a token, e.g. "Norman" in "Normans")."""
    data = json.loads((squad_open / "squad-dev-v1.1.json").read_text(encoding="utf-8"))
    hits = total = 0
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = [a["text"] for a in qa["answers"]]
                total += 1
                hits += has_answer(answers, paragraph["context"])
                assert exact_match(answers[0], answers)
    assert total == 7431
    assert hits / total > 0.99, (hits, total)
