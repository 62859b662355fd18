"""Where the explorer places a unit in its passage (`search.spans.unit_span`), checked on every
one of the demo's 472 propositions against its own passage, with an independent reading of
the passage: spaCy's sentences (the splitter of the sentence units) and the proposition's
sentence chosen by content words, as the propositionizer's sentence pairs choose it. Fast: no
model, no index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from densex.corpus.segment import load_sentencizer, split_sentences
from densex.metrics.propositions import content_words
from densex.pipelines.search.spans import answer_spans, unit_span

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo"


def _demo() -> list[tuple[dict, list[str]]]:
    passages = [json.loads(line) for line in (DEMO / "passages.jsonl").open()]
    props = {}
    for line in (DEMO / "propositions.jsonl").open():
        row = json.loads(line)
        props[row["id"]] = row["propositions"]
    return [(p, props[p["id"]]) for p in passages]


def _sentence_ranges(text: str, sentences: list[str]) -> list[tuple[int, int]]:
    ranges, pos = [], 0
    for s in sentences:
        start = text.index(s, pos)
        ranges.append((start, start + len(s)))
        pos = start + len(s)
    return ranges


def _own_sentence(prop: str, title: str, sentences: list[str]) -> int:
    """The sentence holding most of the proposition's content words, the title's aside
    (earliest on a tie)."""
    mine = content_words(prop) - content_words(title)
    shares = [len(mine & content_words(s)) for s in sentences]
    return max(range(len(sentences)), key=lambda k: (shares[k], -k))


def span_problems(prop: str, passage: dict, sentences: list[str]) -> list[str]:
    """What is wrong with `unit_span(prop, passage)` (empty: nothing)."""
    text, title = passage["text"], passage["title"]
    span = unit_span(prop, text, title)
    if span is None:
        return ["no span"]
    s, e = span
    k = _own_sentence(prop, title, sentences)
    a, b = _sentence_ranges(text, sentences)[k]
    problems = []
    if not a <= s < e <= b:
        problems.append(f"outside its sentence {text[a:b]!r}")
    if (s > 0 and text[s - 1].isalnum()) or (e < len(text) and text[e].isalnum()):
        problems.append("cuts a word")
    if text[s:e].count("(") != text[s:e].count(")") or text[s:e].count('"') % 2:
        problems.append("an unbalanced bracket or quote")
    left_out = (content_words(prop) - content_words(title)) & content_words(text[a:b])
    left_out -= content_words(text[s:e])
    if left_out:
        problems.append(f"leaves out {sorted(left_out)}")
    return problems


def test_every_demo_proposition_spans_its_own_words_in_its_own_sentence():
    nlp = load_sentencizer("")  # the rule-based sentencizer, as the demo's sentence units
    checked, bad = 0, []
    for passage, props in _demo():
        sentences = split_sentences(passage["text"], nlp)
        for prop in props:
            checked += 1
            if problems := span_problems(prop, passage, sentences):
                span = unit_span(prop, passage["text"], passage["title"])
                got = passage["text"][span[0] : span[1]] if span else None
                bad.append(f"{passage['id']}: {prop!r} -> {got!r}: {'; '.join(problems)}")
    assert checked == 472
    assert not bad, f"{len(bad)} of {checked} spans wrong:\n" + "\n".join(bad[:20])


@pytest.mark.parametrize(
    ("prop", "passage_id", "want"),
    [
        ("The SS Carrow Meridian was built in 1897.", "SS_Carrow_Meridian#0-0", "built in 1897"),
        ("The SS Carrow Meridian was built by the Harlan and Voss shipyard.",
         "SS_Carrow_Meridian#0-0", "built in 1897 by the Harlan and Voss shipyard"),
        ("The SS Carrow Meridian could carry 210 passengers.", "SS_Carrow_Meridian#0-0",
         "could carry 210 passengers"),
        ("Within a decade of 1905 the Saltreach Dye Works was producing thalorine dye by the "
         "tonne.", "Ilse_Marrowind#1-0",
         "1905, and within a decade the dye works was producing the new dye by the tonne"),
        ("Ilse Marrowind lived from 1871 to 1939.", "Ilse_Marrowind#0-0",
         "Ilse Marrowind (1871-1939)"),
        ("Kessingbury received a royal charter in 1312.", "Kessingbury#0-0",
         "received a royal charter in 1312"),
    ],
)  # fmt: skip
def test_span_examples(prop, passage_id, want):
    (passage,) = [p for p, _ in _demo() if p["id"] == passage_id]
    s, e = unit_span(prop, passage["text"], passage["title"])
    assert passage["text"][s:e] == want


def test_unit_span_exact_best_match_and_none():
    passage = "The town grew around a ford. In 1312 it received a royal charter from the king."
    assert unit_span("In 1312 it received", passage) == (29, 48)  # a substring: exact
    s, e = unit_span("Kessingbury received a royal charter in 1312.", passage, "Kessingbury")
    assert passage[s:e] == "In 1312 it received a royal charter"  # the leading "In" joins
    assert unit_span("nothing here matches", passage) is None
    assert unit_span("The ford.", "A river.") is None
    bio = "Ilse Marrowind (1871-1939) was a chemist and crystallographer."
    s, e = unit_span("Ilse Marrowind was a chemist.", bio, "Ilse Marrowind")
    assert bio[s:e] == "was a chemist"  # the title's words alone place nothing
    s, e = unit_span("Ilse Marrowind was a chemist.", bio)  # without the title they count
    assert bio[s:e] == "Ilse Marrowind (1871-1939) was a chemist"


def test_answer_spans():
    passage = "The town grew around a ford. In 1312 it received a royal charter from the king."
    assert answer_spans(passage, ["1312", "royal charter", "ROYAL"]) == [(32, 36), (51, 64)]
    assert answer_spans("a12 12", ["12"]) == [(4, 6)]
