"""Per-sentence inputs read in context, and the three article-level splits: the source format
(`pairs.format_source` with a context), the windows (`sentence_inputs.context_of`), the
training pairs and inference inputs written by one function, the coverage that counts the
content only (`copy_lm.content_positions`), `split_articles`, and a student that learns to
take a name from the context (fails when the context is dropped from the inputs)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from densex.propositionizer.backbone import load_seq2seq, output_decoder, target_ids
from densex.propositionizer.copy_lm import content_positions
from densex.propositionizer.module import parse_prediction, set_dropout
from densex.propositionizer.output import passage_source
from densex.propositionizer.pairs import (
    format_source,
    format_target,
    load_squad_open_pairs,
    split_articles,
    split_by_title,
    split_source,
)
from densex.propositionizer.resolve import SentenceSplitter
from densex.propositionizer.sentence_inputs import context_of, sentence_units
from densex.propositionizer.sentence_pairs import sentence_pairs


def test_a_context_sits_marked_between_section_and_content_and_parses_back():
    plain = format_source("Genghis Khan", "Early life", "He was born.")
    ctx = format_source("Genghis Khan", "Early life", "He was born.", "Temüjin was a boy.")
    assert plain == "Title: Genghis Khan. Section: Early life. Content: He was born."
    assert ctx == (
        "Title: Genghis Khan. Section: Early life. Context: Temüjin was a boy. "
        "Content: He was born."
    )
    assert (
        split_source(plain) == split_source(ctx) == ("Genghis Khan", "Early life", "He was born.")
    )
    assert format_source("T", "S", "x", "") == format_source("T", "S", "x")


def test_context_windows():
    s = ["A.", "B.", "C.", "D."]
    assert [context_of(s, k, -1) for k in range(4)] == [None, "A.", "A. B.", "A. B. C."]
    assert [context_of(s, k, 1) for k in range(4)] == [None, "A.", "B.", "C."]
    assert [context_of(s, k, 2) for k in range(4)] == [None, "A.", "A. B.", "B. C."]
    assert [context_of(s, k, 0) for k in range(4)] == [None] * 4


@pytest.fixture(scope="module")
def squad_pairs(squad_open: Path) -> list[dict]:
    return load_squad_open_pairs(squad_open / "passages.jsonl", squad_open / "propositions.jsonl")


def test_training_pairs_and_inference_inputs_are_the_same_strings(squad_pairs):
    """The training pair of sentence k and the inference input of sentence k of the same real
    passage are one string (one function writes both), with every earlier sentence as context."""
    split = SentenceSplitter("en_core_web_lg")
    pairs = squad_pairs[:20]
    train = {p["id"]: p["source"] for p in sentence_pairs(pairs, split.many, -1)}
    passages = []
    for p in pairs:
        title, section, text = split_source(p["source"])
        passages.append({"id": p["id"], "title": title, "section": section, "text": text})
    units, _ = sentence_units(passages, split.many, -1)
    infer = {u["id"]: passage_source(u) for u in units}
    assert train and set(train) <= set(infer)
    assert all(train[k] == infer[k] for k in train)
    later = [u for u in units if not u["id"].endswith("::s0")]
    assert later and all("Context: " in infer[u["id"]] for u in later)
    first = [u for u in units if u["id"].endswith("::s0")]
    assert all("Context:" not in infer[u["id"]] for u in first)


def test_split_articles_is_three_disjoint_article_sets_with_the_old_heldout_as_test(squad_pairs):
    train, val, test = split_articles(squad_pairs, 0.1, 0.1)
    titles = [{p["title"] for p in part} for part in (train, val, test)]
    assert all(titles) and not (
        titles[0] & titles[1] or titles[0] & titles[2] or titles[1] & titles[2]
    )
    assert len(train) + len(val) + len(test) == len(squad_pairs)
    old_train, old_heldout = split_by_title(squad_pairs, 0.1)
    assert [p["id"] for p in test] == [p["id"] for p in old_heldout]  # comparable figures
    assert titles[1] <= {p["title"] for p in old_train}  # validation carved from training
    shuffled = random.Random(0).sample(squad_pairs, len(squad_pairs))
    assert {p["id"] for p in split_articles(shuffled, 0.1, 0.1)[1]} == {p["id"] for p in val}


@pytest.fixture(scope="module")
def copy_dir(copy_lm_dir: str) -> str:
    """The untrained copy student built from the packaged MiniLM: the session's `copy_lm_dir`
    (conftest, built once per run); these tests only read it (training runs on a copy in
    memory)."""
    return copy_lm_dir


def test_coverage_counts_the_content_only(copy_dir):
    """The positions after the last "Content:" marker are the content; title, section and
    context are not (a source without the marker counts everywhere)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(copy_dir)
    model = load_seq2seq(copy_dir)
    src = format_source("Ada", "Life", "She wrote notes.", "Ada Lovelace was a mathematician.")
    ids = tok([src, "no marker here"], return_tensors="pt", padding=True)["input_ids"]
    cover = content_positions(ids, model.config)
    words = tok.convert_ids_to_tokens(ids[0][cover[0]].tolist())
    assert words == ["she", "wrote", "notes", ".", "[SEP]"]
    assert cover[1].all()


NAMES = ["Zorbin", "Quellar", "Mavrenko", "Tashiro", "Brevik", "Oduya", "Lindqvist", "Parvani",
         "Kestrel", "Vantorp", "Ruskovic", "Delacroix", "Ibsenko", "Moravec", "Haldane", "Corvin"]  # fmt: skip
CITIES = ["Lyon", "Porto", "Graz", "Turku", "Brno", "Bergen", "Cork", "Split"]
FIELDS = ["physics", "botany", "law", "music", "geology", "medicine", "chemistry", "history"]


def _people(names: list[str], seed: int) -> list[dict]:
    """Pairs of two-sentence passages whose second sentence says "He ..." of the person the
    first names; the teacher's propositions name the person in both."""
    rng = random.Random(seed)
    pairs = []
    for i, name in enumerate(names):
        city, field = rng.choice(CITIES), rng.choice(FIELDS)
        s1, s2 = f"Arno {name} was born in {city}.", f"He studied {field} at the academy."
        props = [s1, f"Arno {name} studied {field} at the academy."]
        source = format_source("Scholars", "", f"{s1} {s2}")
        pairs.append({"id": f"p{seed}-{i}", "title": "Scholars", "source": source,
                      "target": format_target(props), "name": name})  # fmt: skip
    return pairs


def test_a_student_trained_on_context_pairs_names_the_person_a_pronoun_stands_for(copy_dir):
    """15 steps on per-sentence pairs with context: for held-out people the second sentence's
    proposition names the person from the context. Fails when the context is dropped from the
    inputs (the name is then nowhere in the source). Measured on a 2-core AMD EPYC
    (AVX512-BF16), fp32: 4 of 4 named after 10, 15, 20, 25 and 30 steps, with seeds 0, 1 and 2
    alike (the bound is 3)."""
    from transformers import AutoTokenizer

    split = SentenceSplitter("en_core_web_lg")
    train = [p for p in sentence_pairs(_people(NAMES[:12], 0), split.many, -1) if "::s1" in p["id"]]
    torch.manual_seed(0)
    model, tok = load_seq2seq(copy_dir), AutoTokenizer.from_pretrained(copy_dir)
    set_dropout(model, 0.0)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step in range(15):
        batch = [train[(step * 4 + j) % len(train)] for j in range(4)]
        enc = tok([p["source"] for p in batch], return_tensors="pt", padding=True)
        labels = target_ids(tok, [p["target"] for p in batch])
        lab = torch.full((4, max(map(len, labels))), -100)
        for i, x in enumerate(labels):
            lab[i, : len(x)] = torch.tensor(x)
        model(
            input_ids=enc.input_ids, attention_mask=enc.attention_mask, labels=lab
        ).loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    held = _people(NAMES[12:], 1)
    passages = [{"id": p["id"], "title": "Scholars", "section": "", "text": split_source(p["source"])[2]} for p in held]  # fmt: skip
    units, owners = sentence_units(passages, split.many, -1)
    second = [(u, held[o]["name"]) for u, o in zip(units, owners) if u["id"].endswith("::s1")]
    sources = [passage_source(u) for u, _ in second]
    enc = tok(sources, return_tensors="pt", padding=True)
    out = model.generate(enc.input_ids, enc.attention_mask, max_new_tokens=30)
    texts = output_decoder(tok)(out, sources)
    named = [name in " ".join(parse_prediction(t) or []) for t, (_, name) in zip(texts, second)]
    assert sum(named) >= 3, json.dumps(texts)


def test_min_shared_words_drops_degenerate_propositions_and_falls_back_when_none_is_left():
    """`propositionizer.min_shared_words`: a proposition must share content words (the title's
    left out) with the sentence it was written for; the copied-title loops of an early student
    share none and go; an output left empty falls back on its sentence, saying why."""
    from densex.propositionizer.resolve import resolve_output, supported

    sentence = "Commensal flora reduces the probability that pathogens cause illness."
    props = [
        "Commensal flora reduces the probability that pathogens cause illness.",
        "The Immune system is a a a Immune system.",
        "The Immune system.",
    ]
    assert supported(props, sentence, "Immune system", 1) == props[:1]
    assert supported(props, sentence, "Immune system", 0) == props
    raw = json.dumps(props[1:])
    kept = resolve_output(raw, sentence, "sentences", min_shared=1, title="Immune system")
    assert kept.propositions == [sentence] and kept.reason == "unsupported"
    assert (
        resolve_output(raw, sentence, "sentences", title="Immune system").propositions == props[1:]
    )
