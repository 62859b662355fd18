"""The word budget: the first l whitespace words of the ranked units."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from densex.qa.budget import first_words, words_of


def test_cut_inside_a_unit_keeps_its_first_words():
    units = ["one two three", "four five six seven", "eight"]
    assert first_words(units, 5) == "one two three four five"
    assert first_words(units, 3) == "one two three"  # cut exactly at a unit boundary
    assert first_words(units, 1) == "one"
    assert first_words(units, 0) == ""


def test_fewer_words_than_budget_keeps_everything():
    units = ["alpha beta", "gamma"]
    assert first_words(units, 100) == "alpha beta gamma"
    assert first_words([], 100) == ""


def test_words_are_whitespace_tokens_not_punctuation_or_units():
    units = ["  The 1973 oil-crisis\tbegan,\n in October.  ", "", "U.S. prices rose."]
    # 6 words in the first unit (tabs/newlines split), none in the empty unit
    assert words_of(units, 100) == [
        "The",
        "1973",
        "oil-crisis",
        "began,",
        "in",
        "October.",
        "U.S.",
        "prices",
        "rose.",
    ]
    assert first_words(units, 7) == "The 1973 oil-crisis began, in October. U.S."


def test_rank_order_is_kept():
    assert first_words(["b b", "a a"], 3) == "b b a"


def test_negative_budget_is_an_error():
    with pytest.raises(ValueError, match="budget"):
        first_words(["x"], -1)


word = st.text(alphabet="abcXYZ019.,'-é", min_size=1, max_size=6)
unit = st.lists(word, max_size=12).map(" ".join)


@given(units=st.lists(unit, max_size=8), budget=st.integers(0, 40))
def test_budget_is_a_prefix_of_all_words(units, budget):
    everything = " ".join(units).split()
    out = first_words(units, budget).split()
    assert out == everything[:budget]
    assert len(out) == min(budget, len(everything))
