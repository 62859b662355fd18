"""JSON repair of propositionizer outputs: a catalogue of real failure shapes, a truncation
property, real teacher propositions broken on purpose, and the fallbacks with their counts."""

from __future__ import annotations

import json
from itertools import islice

import pytest
from hypothesis import given
from hypothesis import strategies as st

from densex.propositionizer.parse import parse_propositions
from densex.propositionizer.resolve import (
    ParseStats,
    SentenceSplitter,
    fallback_propositions,
    resolve_output,
)

# (raw output, expected propositions, ok, repairs, dropped)
CATALOGUE = [
    (
        "strict",
        '["The sky is blue.", "Grass is green."]',
        ["The sky is blue.", "Grass is green."],
        True,
        (),
        0,
    ),
    ("fence", '```json\n["A is B.", "C is D."]\n```', ["A is B.", "C is D."], True, ("fence",), 0),
    ("fence-no-lang", '```\n["A is B."]\n```', ["A is B."], True, ("fence",), 0),
    (
        "trailing-comma",
        '["A is B.", "C is D.",]',
        ["A is B.", "C is D."],
        True,
        ("trailing_comma",),
        0,
    ),
    (
        "truncated-mid-string",
        '["A is B.", "C is D.", "E was born in 19',
        ["A is B.", "C is D."],
        True,
        ("truncated",),
        0,
    ),
    (
        "truncated-after-comma",
        '["A is B.", "C is D.",',
        ["A is B.", "C is D."],
        True,
        ("truncated",),
        0,
    ),
    (
        "truncated-after-string",
        '["A is B.", "C is D."',
        ["A is B.", "C is D."],
        True,
        ("truncated",),
        0,
    ),
    (
        "single-quotes",
        "['A is B.', 'C is D.']",
        ["A is B.", "C is D."],
        True,
        ("single_quotes",),
        0,
    ),
    (
        "single-quotes-apostrophe",
        "['A hare\\'s scratch looks like a nest.', 'Eostre's feast is in spring.']",
        ["A hare's scratch looks like a nest.", "Eostre's feast is in spring."],
        True,
        ("single_quotes", "unescaped_quotes"),
        0,
    ),
    ("output-label", 'Output: ["A is B."]', ["A is B."], True, ("prefix",), 0),
    (
        "chatty-prefix-suffix",
        'Sure! Here are the propositions:\n["A is B.", "C is D."]\nLet me know if you need more [help].',
        ["A is B.", "C is D."],
        True,
        ("prefix", "suffix"),
        0,
    ),
    ("bracket-in-prefix", 'Output [JSON]: ["A is B."]', ["A is B."], True, ("prefix",), 0),
    (
        "nested-non-strings",
        '["A is B.", ["C is D."], {"x": 1}, 3, null, true, "E is F."]',
        ["A is B.", "E is F."],
        True,
        (),
        5,
    ),
    ("empty-list", "[]", [], True, (), 0),
    ("empty-strings", '["", "   ", "A is B.", "\\n"]', ["A is B."], True, (), 3),
    ("whitespace-collapsed", '["  A  is\\nB. "]', ["A is B."], True, (), 0),
    (
        "unicode",
        '["Zürich is in Switzerland.", "\\u00c9mile Zola was French.", "Tōkyō \\ud83d\\uddfc"]',
        ["Zürich is in Switzerland.", "Émile Zola was French.", "Tōkyō \U0001f5fc"],
        True,
        (),
        0,
    ),
    (
        "escaped-quotes",
        '["Sermon wrote that \\"hares were seen\\".", "B is C."]',
        ['Sermon wrote that "hares were seen".', "B is C."],
        True,
        (),
        0,
    ),
    (
        "unescaped-inner-quotes",
        '["Sermon wrote that "hares were seen" in spring.", "B is C."]',
        ['Sermon wrote that "hares were seen" in spring.', "B is C."],
        True,
        ("unescaped_quotes",),
        0,
    ),
    ("missing-comma", '["A is B." "C is D."]', ["A is B.", "C is D."], True, ("missing_comma",), 0),
    (
        "object-wrapper",
        '{"propositions": ["A is B.", "C is D."]}',
        ["A is B.", "C is D."],
        True,
        ("object",),
        0,
    ),
    (
        "fenced-and-truncated",
        '```json\n["A is B.", "C i',
        ["A is B."],
        True,
        ("fence", "truncated"),
        0,
    ),
    ("bullets", "- A is B.\n- C is D.\n", ["A is B.", "C is D."], True, ("bullets",), 0),
    ("numbered", '1. "A is B.",\n2) C is D.', ["A is B.", "C is D."], True, ("bullets",), 0),
    ("garbage", "lorem ipsum dolor sit amet $$$ {{", [], False, (), 0),
    ("garbage-with-brackets", "The [citation needed] text ]] [[", [], False, (), 0),
    ("only-opening-bracket", '["unfinished', [], False, (), 0),
    # a '[' inside a string already read is text, never the start of another list
    ("bracket-in-truncated-string", "[\"The album ['Live'", [], False, (), 0),
    ("bracket-list-in-truncated-string", "[\"The album ['Live', 'X'] was", [], False, (), 0),
    ("bracket-after-empty-string", '["", "The album [\'Live\'', [], False, (), 0),
    ("bracket-after-non-string", "[1, \"x ['y'", [], False, (), 0),
    ("bracket-in-object-string", '[{"k": "x [\'y\']"},', [], False, (), 0),
    (
        "bracket-in-later-truncated-string",
        '["A is B.", "The album [\'Live\'',
        ["A is B."],
        True,
        ("truncated",),
        0,
    ),
    (
        "bracket-in-string-after-prefix-list",
        'Output ["x"]: ["The album [\'Live\'',
        ["x"],
        True,
        ("prefix", "suffix"),
        0,
    ),
    ("bracket-in-prose-prefix", 'Note [see below: ["A is B."]', ["A is B."], True, ("prefix",), 0),
    ("empty", "   ", [], False, (), 0),
]


@pytest.mark.parametrize(
    "raw,expected,ok,repairs,dropped", [c[1:] for c in CATALOGUE], ids=[c[0] for c in CATALOGUE]
)
def test_catalogue(raw, expected, ok, repairs, dropped):
    r = parse_propositions(raw)
    assert r.propositions == expected
    assert r.ok is ok
    assert r.repairs == repairs
    assert r.repaired is bool(repairs)
    assert r.dropped == dropped
    assert (r.error is None) is ok


def test_none_is_an_empty_output():
    r = parse_propositions(None)
    assert not r.ok and r.error == "empty output"


# strings rich in what the scanner reacts to: brackets, both quotes, commas, backslashes,
# braces and whole list-looking fragments (`The album ['Live'`), as well as any other text
_FRAGMENTS = ["[", "]", "'", '"', ",", "\\", "{", "}", ":", " ", "a", "b", "['x'", "['x', 'y']"]
_tricky = st.lists(st.sampled_from(_FRAGMENTS), max_size=12).map("".join)
items = st.lists(st.one_of(st.text(min_size=0, max_size=30), _tricky), min_size=0, max_size=8)


@given(items, st.booleans(), st.data())
def test_any_truncation_keeps_exactly_a_prefix_of_complete_strings(values, ascii_only, data):
    """Cut a JSON list anywhere (as max_new_tokens does): what comes back is always a prefix of
    the cleaned list, and the whole list comes back when nothing is cut."""
    text = json.dumps(values, ensure_ascii=ascii_only)
    clean = [" ".join(v.split()) for v in values if v.strip()]
    assert parse_propositions(text).propositions == clean
    cut = data.draw(st.integers(min_value=0, max_value=len(text)))
    got = parse_propositions(text[:cut]).propositions
    assert got == clean[: len(got)]


@given(st.lists(_tricky, min_size=1, max_size=4))
def test_a_cut_inside_the_first_string_yields_nothing(values):
    """No complete string exists before the first one closes, so nothing may come back, even
    when the cut-off string holds something list-like (a '[' in it is never a list start)."""
    text = json.dumps(values)
    first_len = len(json.dumps(values[0]))  # text[1 : 1 + first_len] is the first string
    for cut in range(1, first_len + 1):
        r = parse_propositions(text[:cut])
        assert r.propositions == [] and not r.ok, text[:cut]


def _real_teacher_lists(squad_open, n=60):
    with open(squad_open / "propositions.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["propositions"] for line in islice(f, n)]


def test_real_teacher_outputs_survive_common_breakage(squad_open):
    """The shared teacher propositions, serialised and broken the ways LLMs break them."""
    lists = _real_teacher_lists(squad_open)
    for props in lists:
        text = json.dumps(props, ensure_ascii=False)
        assert parse_propositions(text).propositions == props
        assert parse_propositions(f"```json\n{text}\n```").propositions == props
        assert parse_propositions(f"Output: {text}").propositions == props
        assert parse_propositions(text[:-1] + ",]").propositions == props
        # cut in the middle of the last proposition: all earlier ones survive
        head = json.dumps(props[:-1], ensure_ascii=False)[:-1]  # up to the last item
        assert len(props) > 1 and text.startswith(head + ', "')
        cut = len(head) + 3 + len(json.dumps(props[-1], ensure_ascii=False)) // 2
        r = parse_propositions(text[:cut])
        assert r.propositions == props[:-1] and r.repairs == ("truncated",)


def test_fallbacks_use_spacy_sentences(squad_open):
    passage = json.loads((squad_open / "passages.jsonl").open(encoding="utf-8").readline())
    split = SentenceSplitter("")  # rule-based sentencizer, as the shared passages were made
    sentences = fallback_propositions(passage["text"], "sentences", split)
    assert len(sentences) > 1
    assert " ".join(sentences) == " ".join(passage["text"].split())
    assert fallback_propositions(passage["text"], "passage") == [passage["text"]]
    assert fallback_propositions(passage["text"], "empty") == []
    with pytest.raises(ValueError, match="unknown fallback"):
        fallback_propositions(passage["text"], "nothing")


def test_resolve_and_stats_count_every_path():
    text = "Alice met Bob. They talked."
    split = SentenceSplitter("")
    outputs = [
        '["Alice met Bob."]',  # strict
        '```json\n["Alice met Bob.", 3]\n```',  # repaired, 1 dropped
        "I cannot help with that.",  # unparseable -> fallback
        "[]",  # parsed but empty -> fallback
    ]
    stats = ParseStats()
    resolved = [resolve_output(o, text, "sentences", split) for o in outputs]
    for r in resolved:
        stats.add(r)
    assert [r.propositions for r in resolved] == [
        ["Alice met Bob."],
        ["Alice met Bob."],
        ["Alice met Bob.", "They talked."],
        ["Alice met Bob.", "They talked."],
    ]
    assert [r.reason for r in resolved] == [None, None, "unparseable", "empty"]
    d = stats.as_dict()
    assert d["passages"] == 4 and d["parsed_strict"] == 2 and d["repaired"] == 1
    assert d["unparseable"] == 1 and d["parse_rate"] == 0.75
    assert d["parsed_strict"] + d["repaired"] + d["unparseable"] == d["passages"]
    assert d["fallbacks"] == {"sentences": 2} and d["fallback_total"] == 2
    assert d["fallback_reasons"] == {"empty": 1, "unparseable": 1}
    assert d["repairs"] == {"fence": 1} and d["items_dropped"] == 1
    assert d["propositions"] == 6
    assert resolve_output("junk", text, "passage").propositions == [text]
    assert resolve_output("junk", text, "empty").propositions == []
    with pytest.raises(ValueError):
        resolve_output("[]", text, "bogus")
