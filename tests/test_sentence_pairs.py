"""Per-sentence training pairs: the teacher's propositions aligned to the sentences of real
squad-open passages, and the data module that adds them to the training split only."""

from __future__ import annotations

import json

from densex.corpus.segment import load_sentencizer, split_sentences, split_sentences_many
from densex.propositionizer.data import PropositionDataModule
from densex.propositionizer.pairs import format_source, load_squad_open_pairs
from densex.propositionizer.sentence_pairs import align_propositions, sentence_pairs


def test_each_proposition_goes_to_the_sentence_it_restates():
    sentences = [
        "The Rhine rises in the Swiss Alps.",
        "It is joined by its major tributary, the river Aare.",
        "The Aare more than doubles its discharge.",
    ]
    props = [
        "The Rhine rises in the Swiss Alps.",
        "The Rhine is joined by its major tributary, the river Aare.",
        "The Rhine's major tributary is the river Aare.",
        "The Aare more than doubles the Rhine's discharge.",
        "This happens every year.",  # no shared content word: stays with the previous one
    ]
    groups = align_propositions(props, sentences, title="Rhine")
    assert groups == [props[:1], props[1:3], props[3:]]


def test_sentence_pairs_of_real_passages(squad_open):
    pairs = load_squad_open_pairs(squad_open / "passages.jsonl", squad_open / "propositions.jsonl")
    pairs = pairs[:20]
    nlp = load_sentencizer("")
    out = sentence_pairs(pairs, lambda texts: split_sentences_many(texts, nlp))
    by_id = {p["id"]: p for p in pairs}
    passages = {
        r["id"]: r
        for r in map(json.loads, (squad_open / "passages.jsonl").open())
        if r["id"] in by_id
    }
    assert len(out) > len(pairs)
    for pair in pairs:  # every teacher proposition once, in the teacher's order
        mine = [p for p in out if p["id"].startswith(pair["id"] + "::s")]
        props = [x for p in mine for x in json.loads(p["target"])]
        assert props == json.loads(pair["target"])
        passage = passages[pair["id"]]
        sentences = split_sentences(passage["text"], nlp)
        for p in mine:  # the source is the sentence the id names, in the inference format
            k = int(p["id"].rsplit("::s", 1)[1])
            assert p["source"] == format_source(passage["title"], passage["section"], sentences[k])
            assert p["title"] == pair["title"]


def test_the_data_module_adds_sentence_pairs_to_training_only(squad_open):
    kw = {
        "passages": str(squad_open / "passages.jsonl"),
        "propositions": str(squad_open / "propositions.jsonl"),
        "limit_train": 30,
        "limit_val": 8,
        "spacy_model": "",
    }
    plain = PropositionDataModule(**kw)
    plain.load_pairs()
    dm = PropositionDataModule(**kw, sentence_pairs=True)
    dm.load_pairs()
    assert dm.val_pairs == plain.val_pairs
    assert dm.train_pairs[:30] == plain.train_pairs
    extra = dm.train_pairs[30:]
    assert extra and dm.stats["train/sentence_pairs"] == len(extra)
    assert {p["id"].split("::s")[0] for p in extra} <= {p["id"] for p in plain.train_pairs}
