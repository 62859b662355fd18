"""Answer recall within the first l words: the one-scan curve against brute-force has_answer."""

from __future__ import annotations

import csv
import random

import numpy as np
import pytest

from densex.metrics.answers import dpr_tokens, has_answer
from densex.qa.answer_recall import (
    answer_recall_by_words,
    first_answer_word,
    first_answer_words,
    recall_curve,
)
from densex.qa.budget import first_words, words_of
from densex.qa.cell import qa_metrics, read_curve


def brute_force_curve(ranked, answers, max_words, match_type="string"):
    """The definition: has_answer on the first l words, for every l and question."""
    return np.array(
        [
            100.0
            * np.mean(
                [has_answer(a, first_words(u, n), match_type) for u, a in zip(ranked, answers)]
            )
            for n in range(max_words + 1)
        ]
    )


VOCAB = [
    "paris",
    "Paris",
    "france",
    "1,000",
    "the",
    "U.S.",
    "Obama's",
    "é",
    "e\u0301",
    "river",
    "-",
]


def random_case(rng: random.Random):
    def text(n):
        return " ".join(rng.choice(VOCAB) for _ in range(n))

    units = [text(rng.randint(0, 6)) for _ in range(rng.randint(0, 5))]
    answers = [text(rng.randint(1, 2)) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.2:
        answers.append("...")  # no tokens: has_answer ignores it
    return units, answers


@pytest.mark.parametrize("seed", range(5))
def test_curve_matches_brute_force_on_random_cases(seed):
    rng = random.Random(seed)
    cases = [random_case(rng) for _ in range(40)]
    ranked, answers = [c[0] for c in cases], [c[1] for c in cases]
    max_words = 25
    fast = answer_recall_by_words(ranked, answers, max_words)
    slow = brute_force_curve(ranked, answers, max_words)
    np.testing.assert_allclose(fast, slow)
    # and the per-question smallest l is exactly where has_answer first holds
    for units, ans in zip(ranked, answers):
        words = words_of(units, max_words)
        l_min = first_answer_word(words, ans)
        truth = [has_answer(ans, " ".join(words[:n])) for n in range(len(words) + 1)]
        assert l_min == (truth.index(True) if any(truth) else None)


def test_answer_spanning_two_units_and_tokenised_like_dpr():
    units = ["it cost 1,000", "dollars in the U.S. capital"]
    # "1,000 dollars" spans the unit boundary; DPR tokens: 1 , 000 dollars
    assert first_answer_word(words_of(units, 50), ["1,000 Dollars"]) == 4
    assert first_answer_word(words_of(units, 50), ["u.s."]) == 7
    assert first_answer_word(words_of(units, 50), ["dollars", "cost"]) == 2  # earliest answer
    assert first_answer_word(words_of(units, 50), ["euros"]) is None
    # accents: NFC and NFD forms match each other, as in DPR
    assert first_answer_word(["Beyonc\u00e9"], ["beyonce\u0301"]) == 1


def test_words_are_tokenised_by_the_shared_dpr_tokens_cache():
    """One DPR tokenisation (and cache) for has_answer and the answer-recall scan."""
    dpr_tokens.cache_clear()
    assert first_answer_word(["Paris,", "France"], ["paris , france", "Lyon"]) == 2
    assert dpr_tokens.cache_info().currsize == 4  # the 2 words and the 2 answers
    assert dpr_tokens.cache_info().misses == 4


def test_regex_answers_match_brute_force():
    ranked = [["born in 1961 in Honolulu"], ["the year nineteen"], ["x y", "z 42 w"]]
    answers = [[r"19\d\d"], [r"\d+"], [r"4[0-9]", r"nope"]]
    np.testing.assert_allclose(
        answer_recall_by_words(ranked, answers, 8, match_type="regex"),
        brute_force_curve(ranked, answers, 8, match_type="regex"),
    )
    assert first_answer_words(ranked, answers, 8, "regex") == [3, None, 4]


def test_recall_curve_is_cumulative_percent():
    curve = recall_curve([0, 2, None, 5, 99], max_words=5)
    assert curve.tolist() == [20.0, 20.0, 40.0, 40.0, 40.0, 60.0]


def test_qa_metrics_without_reader_on_real_squad(squad_open, tmp_path):
    """Real SQuAD questions: a distractor chunk without the answer, then the gold chunk."""
    from densex.utils.io import read_jsonl

    passages = [p["text"] for p in read_jsonl(squad_open / "passages.jsonl")]
    questions, ranked, offsets = [], [], []
    for q in read_jsonl(squad_open / "questions.jsonl"):
        gold = next((t for t in passages if has_answer(q["answers"], t)), None)
        # (one real SQuAD answer is "." and so is in every chunk: such questions are skipped)
        distractor = next((t for t in passages if not has_answer(q["answers"], t)), None)
        if gold is not None and distractor is not None:
            questions.append(q)
            ranked.append([distractor, gold])
            offsets.append(len(distractor.split()))
        if len(questions) == 60:
            break
    metrics = qa_metrics(questions, ranked, None, budget=100, max_words=300, out_dir=tmp_path)
    assert set(metrics) == {"answer_recall@100"}  # 500 > max_words; no reader -> no EM
    words, recall = read_curve(tmp_path / "answer_recall_by_words.csv")
    assert words == list(range(301))
    assert all(a <= b for a, b in zip(recall, recall[1:]))
    # nothing inside the distractors; everything once the gold chunk (<= 168 words) is read
    assert recall[min(offsets)] == 0.0
    assert recall[max(offsets) + 168] == 100.0
    assert metrics["answer_recall@100"] == recall[100]
    assert not (tmp_path / "reader_predictions.jsonl").exists()
    with (tmp_path / "answer_recall_by_words.csv").open() as f:
        assert next(csv.reader(f)) == ["words", "recall"]
